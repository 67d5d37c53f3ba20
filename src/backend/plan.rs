//! The host side of the dispatch ABI: which input feeds which buffer, how big every
//! device buffer is, how many workgroups run, and how outputs are shaped. Pure code,
//! mirroring `vyre-reference`'s `run_hashmap_reference` exactly; testable without a GPU.

use crate::codegen::{BindingRole, KernelAbi};
use crate::error::CudaError;
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::Program;

/// Device limits the plan must respect.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GridLimits {
    pub(crate) max_grid_dim: [u32; 3],
    pub(crate) max_buffer_bytes: u64,
}

/// One binding's bytes for one dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BindingBytes {
    /// Byte length of the device buffer (input length, or the zeroed output size).
    pub(crate) len: usize,
    /// Element count passed to the kernel (`BufLen` and bounds checks).
    pub(crate) elements: u32,
    /// Index into the caller's inputs, for bindings that consume one.
    pub(crate) input: Option<usize>,
}

/// Everything one launch needs that depends on the inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DispatchPlan {
    /// Inline for up to eight bindings: a warm dispatch allocates nothing to plan.
    pub(crate) bindings: smallvec::SmallVec<[BindingBytes; 8]>,
    pub(crate) grid: [u32; 3],
}

impl DispatchPlan {
    /// The borrowed path: build the plan for `inputs` (their byte lengths) or fail with a
    /// clear error before anything touches the device. Outputs get the reference's
    /// zero-initialised sizes.
    pub(crate) fn new(
        program: &Program,
        abi: &KernelAbi,
        input_lens: &[usize],
        config: &DispatchConfig,
        limits: GridLimits,
    ) -> Result<Self, CudaError> {
        let expected = abi.input_count();
        // The reference's legacy form: one slice per non-workgroup buffer, where the
        // slices at backend-allocated outputs are ignored (those still start zeroed).
        let legacy = input_lens.len() == abi.bindings.len() && input_lens.len() != expected;
        if input_lens.len() != expected && !legacy {
            let names: Vec<&str> = abi
                .bindings
                .iter()
                .filter(|b| b.role.takes_input())
                .map(|b| &*b.name)
                .collect();
            return Err(CudaError::invalid_input(
                format!(
                    "program takes {expected} input(s) ({}) but {} were supplied",
                    names.join(", "),
                    input_lens.len()
                ),
                "pass one byte slice per non-output, non-workgroup buffer, in Program::buffers() order (or, as the reference also accepts, one per non-workgroup buffer)",
            ));
        }
        let mut next_input = 0usize;
        let mut lens = smallvec::SmallVec::<[(usize, Option<usize>); 8]>::new();
        for binding in &abi.bindings {
            let decl = &program.buffers()[binding.decl_index];
            let stride = binding.element_size as usize;
            if binding.role.takes_input() {
                let index = next_input;
                next_input += 1;
                let len = input_lens[index];
                let required =
                    crate::codegen::declared_bytes(&binding.element, decl.count(), stride as u32)
                        as usize;
                if len < required {
                    return Err(CudaError::invalid_input(
                        format!(
                            "input {index} for buffer `{}` has {len} bytes but the buffer declares {} elements of {} ({required} bytes)",
                            binding.name,
                            decl.count(),
                            binding.element
                        ),
                        "provide at least the declared number of bytes",
                    ));
                }
                lens.push((len, Some(index)));
            } else {
                if binding.role == BindingRole::Output {
                    decl.require_static_readback_size().map_err(vyre_message)?;
                }
                if legacy {
                    check_initializer(binding, next_input, input_lens[next_input])?;
                    next_input += 1;
                }
                lens.push((binding.output_bytes, None));
            }
        }
        Self::from_lengths(program, abi, &lens, config, limits)
    }

    /// The resident path: every binding is an existing device buffer of the given byte
    /// length (in `abi.bindings` order), bound in place. Element counts come from those
    /// lengths (whole elements; a trailing partial element is never addressed), and the
    /// grid follows the same reference rules as the borrowed path.
    pub(crate) fn resident(
        program: &Program,
        abi: &KernelAbi,
        buffer_lens: &[usize],
        config: &DispatchConfig,
        limits: GridLimits,
    ) -> Result<Self, CudaError> {
        if buffer_lens.len() != abi.bindings.len() {
            let names: Vec<&str> = binding_order(program, abi)
                .iter()
                .map(|&index| &*abi.bindings[index].name)
                .collect();
            return Err(CudaError::invalid_input(
                format!(
                    "program has {} non-workgroup buffer(s) ({}, in binding order) but {} resident handle(s) were supplied",
                    abi.bindings.len(),
                    names.join(", "),
                    buffer_lens.len()
                ),
                "pass one resident handle per non-workgroup buffer, sorted by BufferDecl::binding",
            ));
        }
        let lens: smallvec::SmallVec<[(usize, Option<usize>); 8]> =
            buffer_lens.iter().map(|&len| (len, None)).collect();
        Self::from_lengths(program, abi, &lens, config, limits)
    }

    /// The one plan builder both paths share: per-binding byte lengths (and input index)
    /// in `abi.bindings` order -> element counts and the reference's grid.
    fn from_lengths(
        program: &Program,
        abi: &KernelAbi,
        lens: &[(usize, Option<usize>)],
        config: &DispatchConfig,
        limits: GridLimits,
    ) -> Result<Self, CudaError> {
        let mut bindings = smallvec::SmallVec::with_capacity(abi.bindings.len());
        let (mut max_returned, mut max_other) = (0u32, 1u32);
        for (binding, &(len, input)) in abi.bindings.iter().zip(lens) {
            let stride = binding.element_size as usize;
            if len as u64 > limits.max_buffer_bytes {
                return Err(CudaError::invalid_input(
                    format!(
                        "buffer `{}` needs {len} bytes, more than the device's {} bytes",
                        binding.name, limits.max_buffer_bytes
                    ),
                    "split the dispatch into smaller buffers",
                ));
            }
            let count = crate::codegen::count_param(&binding.element, stride as u32, len as u64);
            let elements = u32::try_from(count).map_err(|_| {
                CudaError::invalid_input(
                    format!(
                        "buffer `{}` holds more than u32::MAX elements",
                        binding.name
                    ),
                    "split the dispatch so every buffer is indexable with u32",
                )
            })?;
            // The grid follows the reference's element counts (two 4-bit elements a byte);
            // the kernel gets the elements it can address (or, for vectors of 4-bit lanes,
            // the reference's count: `count_param`).
            let counted = crate::codegen::buf_len(&binding.element, len as u64);
            if binding.role.is_returned() {
                max_returned = max_returned.max(counted);
            } else {
                max_other = max_other.max(counted);
            }
            bindings.push(BindingBytes {
                len,
                elements,
                input,
            });
        }
        let grid = match explicit_grid(config) {
            Some(grid) => grid,
            None => reference_grid(program, abi, max_returned, max_other, config),
        };
        check_grid(grid, abi.workgroup_size, limits)?;
        Ok(Self { bindings, grid })
    }
}

/// The grid `config` names: `grid_override`, else `dispatch_grid`, the reference's
/// explicit grid (each axis at least 1; drivers set `grid_override` beside it).
pub(crate) fn explicit_grid(config: &DispatchConfig) -> Option<[u32; 3]> {
    let dispatch_grid = config
        .dispatch_grid
        .map(|grid| grid.map(|axis| axis.max(1)));
    config.grid_override.or(dispatch_grid)
}

/// A legacy output initializer (the reference's form with one slice per non-workgroup
/// buffer) may hold any bytes, but no fewer than the output's logical size (its byte
/// range when it declares one), as the reference requires.
fn check_initializer(
    binding: &crate::codegen::KernelBinding,
    index: usize,
    len: usize,
) -> Result<(), CudaError> {
    let logical = (binding.output_byte_range.as_ref()).map_or(binding.output_bytes, |r| r.len());
    if len >= logical {
        return Ok(());
    }
    Err(CudaError::invalid_input(
        format!(
            "input {index} (the initializer of output `{}`) has {len} bytes but the output needs {logical}",
            binding.name
        ),
        "size each output's slot to at least the output's byte length, or pass only the program's inputs",
    ))
}

/// A vyre check's "what. Fix: how" text as our error.
fn vyre_message(text: String) -> CudaError {
    match text.split_once("Fix:") {
        Some((what, fix)) => CudaError::invalid_input(what.trim(), fix.trim()),
        None => CudaError::invalid_input(text, "repair the program as the message says"),
    }
}

/// The grid the reference runs `program` on when its bindings (in `abi.bindings` order)
/// hold `lens` bytes and nothing overrides it (no device limits applied).
pub(crate) fn reference_grid_for(
    program: &Program,
    abi: &KernelAbi,
    lens: &[usize],
) -> Result<[u32; 3], CudaError> {
    let limits = GridLimits {
        max_grid_dim: [u32::MAX; 3],
        max_buffer_bytes: u64::MAX,
    };
    let plan = DispatchPlan::resident(program, abi, lens, &DispatchConfig::default(), limits)?;
    Ok(plan.grid)
}

/// The resident ABI's order: indices into `abi.bindings` (declaration order) sorted by
/// `BufferDecl::binding` (ties keep declaration order). Resident handle `k` binds
/// `abi.bindings[binding_order(..)[k]]`.
pub(crate) fn binding_order(program: &Program, abi: &KernelAbi) -> smallvec::SmallVec<[usize; 8]> {
    let mut order: smallvec::SmallVec<[usize; 8]> = (0..abi.bindings.len()).collect();
    order.sort_by_key(|&index| program.buffers()[abi.bindings[index].decl_index].binding());
    order
}

/// The reference's grid: enough workgroups for `dispatch_elements`, spread over the
/// workgroup's active axes by a ceil'd n-th root.
fn reference_grid(
    program: &Program,
    abi: &KernelAbi,
    max_returned: u32,
    max_other: u32,
    config: &DispatchConfig,
) -> [u32; 3] {
    let has_returned = abi.bindings.iter().any(|b| b.role.is_returned());
    let has_workgroup_buffer = abi.shared_bytes > 0
        || program
            .buffers()
            .iter()
            .any(|decl| decl.access() == vyre_foundation::ir::BufferAccess::Workgroup);
    let force_full_span = has_workgroup_buffer || program.stats().atomic_op_count > 0;
    let program_graph_nodes = program
        .buffers()
        .iter()
        .find(|decl| decl.binding() == 0 && decl.name() == "pg_nodes")
        .map_or(0, |decl| decl.count());
    let dispatch_elements = max_returned
        .max(program_graph_nodes)
        .max(1)
        .max(if !has_returned || force_full_span {
            max_other
        } else {
            1
        })
        .max(config.dispatch_elements.unwrap_or(0));
    let per_group = abi
        .workgroup_size
        .iter()
        .copied()
        .fold(1u32, u32::saturating_mul)
        .max(1);
    let total = dispatch_elements.div_ceil(per_group).max(1);
    let active = (0..3).filter(|&axis| abi.workgroup_size[axis] > 1);
    let mut grid = [1u32, 1, 1];
    match active.clone().count() {
        0 => grid[0] = total,
        axes => {
            let base = (f64::from(total)).powf(1.0 / axes as f64).ceil() as u32;
            for axis in active {
                grid[axis] = base.max(1);
            }
        }
    }
    grid
}

fn check_grid(grid: [u32; 3], workgroup: [u32; 3], limits: GridLimits) -> Result<(), CudaError> {
    for axis in 0..3 {
        if grid[axis] == 0 {
            return Err(CudaError::invalid_input(
                format!("grid {grid:?} has a zero dimension"),
                "every grid_override dimension must be >= 1",
            ));
        }
        if grid[axis] > limits.max_grid_dim[axis] {
            return Err(CudaError::invalid_input(
                format!(
                    "grid {grid:?} exceeds the device's grid limit {:?}",
                    limits.max_grid_dim
                ),
                "dispatch fewer workgroups per axis (use a larger workgroup or split the work)",
            ));
        }
        // The reference errors when a global invocation id overflows u32.
        let last = u64::from(grid[axis]) * u64::from(workgroup[axis]) - 1;
        if last > u64::from(u32::MAX) {
            return Err(CudaError::invalid_input(
                format!("grid {grid:?} x workgroup {workgroup:?} overflows u32 invocation ids"),
                "reduce the grid so every global invocation id fits in u32",
            ));
        }
    }
    Ok(())
}

/// Cut a returned buffer down to its declared `output_byte_range`, as the reference does.
pub(crate) fn shape_output(bytes: &mut Vec<u8>, range: Option<&std::ops::Range<usize>>) {
    if let Some(range) = range {
        if range.start <= range.end && range.end <= bytes.len() {
            bytes.truncate(range.end);
            bytes.drain(..range.start);
        }
    }
}

/// Whether a binding's device buffer starts zeroed (outputs) rather than with input bytes.
pub(crate) fn starts_zeroed(role: BindingRole) -> bool {
    role == BindingRole::Output
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::{emit_ptx, PtxTarget};
    use vyre_foundation::ir::{BufferAccess, BufferDecl, DataType, Expr, Node};

    const LIMITS: GridLimits = GridLimits {
        max_grid_dim: [i32::MAX as u32, 65535, 65535],
        max_buffer_bytes: 1 << 34,
    };

    fn plan(
        program: &Program,
        inputs: &[usize],
        config: &DispatchConfig,
    ) -> Result<DispatchPlan, CudaError> {
        let kernel = emit_ptx(program, config.workgroup_override, PtxTarget::sm90()).unwrap();
        DispatchPlan::new(program, &kernel.abi, inputs, config, LIMITS)
    }

    fn copy_program(workgroup: [u32; 3]) -> Program {
        Program::wrapped(
            vec![
                BufferDecl::read("a", 0, DataType::U32),
                BufferDecl::output("out", 1, DataType::U32).with_count(100),
            ],
            workgroup,
            vec![Node::store(
                "out",
                Expr::gid_x(),
                Expr::load("a", Expr::gid_x()),
            )],
        )
    }

    #[test]
    fn one_dimensional_grid_covers_the_largest_output() {
        let p = plan(
            &copy_program([64, 1, 1]),
            &[400],
            &DispatchConfig::default(),
        )
        .unwrap();
        assert_eq!(p.grid, [2, 1, 1]);
        assert_eq!(
            p.bindings[0],
            BindingBytes {
                len: 400,
                elements: 100,
                input: Some(0)
            }
        );
        assert_eq!(
            p.bindings[1],
            BindingBytes {
                len: 400,
                elements: 100,
                input: None
            }
        );
    }

    #[test]
    fn multi_axis_workgroups_use_the_reference_cube_root_spread() {
        let program = Program::wrapped(
            vec![BufferDecl::output("out", 0, DataType::U32).with_count(10000)],
            [32, 2, 1],
            vec![Node::store("out", Expr::gid_x(), Expr::u32(1))],
        );
        let p = plan(&program, &[], &DispatchConfig::default()).unwrap();
        assert_eq!(p.grid, [13, 13, 1]);
        let program = Program::wrapped(
            vec![BufferDecl::output("out", 0, DataType::U32).with_count(1000)],
            [4, 4, 4],
            vec![Node::store("out", Expr::gid_x(), Expr::u32(1))],
        );
        assert_eq!(
            plan(&program, &[], &DispatchConfig::default())
                .unwrap()
                .grid,
            [3, 3, 3]
        );
    }

    #[test]
    fn dispatch_grid_is_the_grid_unless_grid_override_is_set() {
        let mut config = DispatchConfig::default();
        config.dispatch_grid = Some([3, 0, 2]);
        let program = copy_program([64, 1, 1]);
        assert_eq!(plan(&program, &[400], &config).unwrap().grid, [3, 1, 2]);
        config.grid_override = Some([5, 1, 1]);
        assert_eq!(plan(&program, &[400], &config).unwrap().grid, [5, 1, 1]);
    }

    #[test]
    fn countless_backend_allocated_outputs_are_rejected_like_the_reference() {
        let countless = Program::wrapped(
            vec![BufferDecl::output("out", 0, DataType::U32)],
            [1, 1, 1],
            vec![Node::store("out", Expr::u32(0), Expr::u32(1))],
        );
        let text = plan(&countless, &[], &DispatchConfig::default())
            .unwrap_err()
            .to_string();
        assert!(text.contains("readback size is unknown"), "{text}");
        assert_eq!(text.matches("Fix:").count(), 1, "{text}");
        // Declared empty on purpose: accepted.
        let empty = Program::wrapped(
            vec![BufferDecl::output("out", 0, DataType::U32).with_output_byte_range(0..0)],
            [1, 1, 1],
            vec![],
        );
        assert!(plan(&empty, &[], &DispatchConfig::default()).is_ok());
    }

    #[test]
    fn grid_override_and_dispatch_elements_are_honoured() {
        let mut config = DispatchConfig::default();
        config.grid_override = Some([5, 1, 1]);
        assert_eq!(
            plan(&copy_program([64, 1, 1]), &[400], &config)
                .unwrap()
                .grid,
            [5, 1, 1]
        );
        let mut config = DispatchConfig::default();
        config.dispatch_elements = Some(1000);
        assert_eq!(
            plan(&copy_program([64, 1, 1]), &[400], &config)
                .unwrap()
                .grid,
            [16, 1, 1]
        );
    }

    #[test]
    fn longer_inputs_are_accepted_and_counted_like_the_reference() {
        let p = plan(
            &copy_program([64, 1, 1]),
            &[800],
            &DispatchConfig::default(),
        )
        .unwrap();
        assert_eq!(p.bindings[0].elements, 200);
        // Only returned buffers size the grid when the program has outputs.
        assert_eq!(p.grid, [2, 1, 1]);
        // A trailing partial element is accepted, as the reference does, and not counted.
        for (len, elements) in [(399, 99), (398, 99)] {
            let p = plan(
                &copy_program([64, 1, 1]),
                &[len],
                &DispatchConfig::default(),
            );
            assert_eq!(p.unwrap().bindings[0].elements, elements);
        }
    }

    #[test]
    fn bad_inputs_are_rejected_with_a_fix() {
        let program = copy_program([64, 1, 1]);
        for inputs in [&[][..], &[400, 400, 4][..]] {
            let error = plan(&program, inputs, &DispatchConfig::default()).unwrap_err();
            let backend = error.to_string();
            assert!(backend.to_string().contains("Fix:"), "{backend}");
        }
        let mut config = DispatchConfig::default();
        config.grid_override = Some([0, 1, 1]);
        assert!(plan(&program, &[400], &config).is_err());
        config.grid_override = Some([1, 70000, 1]);
        assert!(plan(&program, &[400], &config).is_err());
    }

    #[test]
    fn legacy_form_skips_the_output_slots_like_the_reference() {
        // The slot's bytes are ignored (the output starts zeroed), but not its size: an
        // initializer smaller than the output is rejected, as the reference rejects it.
        let error = plan(
            &copy_program([64, 1, 1]),
            &[400, 12],
            &DispatchConfig::default(),
        );
        let text = error.unwrap_err().to_string();
        assert!(
            text.contains("has 12 bytes but the output needs 400"),
            "{text}"
        );
        let p = plan(
            &copy_program([64, 1, 1]),
            &[400, 400],
            &DispatchConfig::default(),
        )
        .unwrap();
        assert_eq!(p.bindings[0].input, Some(0));
        assert_eq!(
            p.bindings[1],
            BindingBytes {
                len: 400,
                elements: 100,
                input: None
            }
        );
    }

    #[test]
    fn read_write_buffers_are_inputs_and_outputs() {
        let program = Program::wrapped(
            vec![
                BufferDecl::read("in0", 3, DataType::U32),
                BufferDecl::output("res", 0, DataType::U32).with_count(4),
                BufferDecl::storage("rw", 1, BufferAccess::ReadWrite, DataType::U32),
                BufferDecl::read("in1", 2, DataType::U32),
            ],
            [1, 1, 1],
            vec![Node::store("res", Expr::u32(0), Expr::u32(1))],
        );
        let kernel = emit_ptx(&program, None, PtxTarget::sm90()).unwrap();
        let roles: Vec<_> = kernel.abi.bindings.iter().map(|b| b.role).collect();
        assert_eq!(
            roles,
            [
                BindingRole::Input,
                BindingRole::Output,
                BindingRole::InputOutput,
                BindingRole::Input
            ]
        );
        let p = DispatchPlan::new(
            &program,
            &kernel.abi,
            &[8, 12, 16],
            &DispatchConfig::default(),
            LIMITS,
        )
        .unwrap();
        let inputs: Vec<_> = p.bindings.iter().map(|b| b.input).collect();
        assert_eq!(inputs, [Some(0), None, Some(1), Some(2)]);
    }

    #[test]
    fn resident_handles_follow_binding_order_and_size_the_grid_from_buffer_lengths() {
        let program = Program::wrapped(
            vec![
                BufferDecl::read("in0", 3, DataType::U32),
                BufferDecl::output("res", 0, DataType::U32).with_count(4),
                BufferDecl::storage("rw", 1, BufferAccess::ReadWrite, DataType::U32),
                BufferDecl::read("in1", 2, DataType::U32),
            ],
            [64, 1, 1],
            vec![Node::store("res", Expr::u32(0), Expr::u32(1))],
        );
        let kernel = emit_ptx(&program, None, PtxTarget::sm90()).unwrap();
        let order = binding_order(&program, &kernel.abi);
        let names: Vec<&str> = order
            .iter()
            .map(|&i| &*kernel.abi.bindings[i].name)
            .collect();
        assert_eq!(names, ["res", "rw", "in1", "in0"]);
        // Lengths in declaration order: in0, res, rw, in1. A larger resident output than
        // declared is allowed and counts; a trailing partial element is not addressed.
        let p = DispatchPlan::resident(
            &program,
            &kernel.abi,
            &[40, 1000 * 4 + 3, 8, 4],
            &DispatchConfig::default(),
            LIMITS,
        )
        .unwrap();
        assert_eq!(p.bindings[1].elements, 1000);
        assert!(p.bindings.iter().all(|b| b.input.is_none()));
        assert_eq!(p.grid, [16, 1, 1]);
        // The borrowed path with the same lengths gives the same grid rule.
        let borrowed = DispatchPlan::new(
            &program,
            &kernel.abi,
            &[40, 8, 4],
            &DispatchConfig::default(),
            LIMITS,
        )
        .unwrap();
        assert_eq!(borrowed.grid, [1, 1, 1]);
        // As the reference, an input may end in a partial element, never addressed.
        let ragged = DispatchPlan::new(
            &program,
            &kernel.abi,
            &[43, 4 * 5 + 1, 6],
            &DispatchConfig::default(),
            LIMITS,
        )
        .unwrap();
        let elements: Vec<u32> = ragged.bindings.iter().map(|b| b.elements).collect();
        assert_eq!(elements, [10, 4, 5, 1]);
        let error = DispatchPlan::resident(
            &program,
            &kernel.abi,
            &[4, 4, 4],
            &DispatchConfig::default(),
            LIMITS,
        )
        .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("res, rw, in1, in0") && text.contains("Fix:"),
            "{text}"
        );
        // Zero-length resident buffers are legal: every access is out of bounds.
        let p = DispatchPlan::resident(
            &program,
            &kernel.abi,
            &[0, 0, 0, 0],
            &DispatchConfig::default(),
            LIMITS,
        )
        .unwrap();
        assert!(p.bindings.iter().all(|b| b.elements == 0));
        assert_eq!(p.grid, [1, 1, 1]);
    }

    #[test]
    fn output_byte_range_is_applied_only_when_valid() {
        let mut bytes = vec![1, 2, 3, 4, 5];
        shape_output(&mut bytes, Some(&(1..3)));
        assert_eq!(bytes, [2, 3]);
        let mut bytes = vec![1, 2, 3];
        shape_output(&mut bytes, Some(&(1..9)));
        assert_eq!(bytes, [1, 2, 3]);
    }
}

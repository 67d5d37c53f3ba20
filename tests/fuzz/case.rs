//! A fuzz case (program + inputs + dispatch config), its regression-file format and a
//! readable pseudo-code printer.
//!
//! Regression files (`tests/fuzz_regressions/*.case`) are line-based text:
//!
//! ```text
//! # free-form comments (the program as pseudo-code, expected vs got, ...)
//! kind: mismatch            # what failed when it was found
//! status: open              # open (a known, unfixed bug) or fixed
//! seed: 0x1234              # generator seed it came from (informational)
//! workgroup-override: none  # or x,y,z
//! grid-override: none       # or x,y,z
//! dispatch-elements: none   # or N (DispatchConfig::dispatch_elements)
//! program: 56495230...      # Program::to_wire(), hex
//! input: 0100000002000000   # one line per input buffer, hex (may be empty)
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::{BufferAccess, DataType, Expr, Node, Program};

/// One program with its inputs and dispatch configuration.
#[derive(Debug, Clone)]
pub struct FuzzCase {
    pub seed: u64,
    pub program: Program,
    pub inputs: Vec<Vec<u8>>,
    pub config: DispatchConfig,
}

/// A regression case read back from disk.
#[derive(Debug, Clone)]
pub struct SavedCase {
    pub path: PathBuf,
    pub case: FuzzCase,
    pub kind: String,
    /// `open`: a known bug not fixed yet; `fixed`: must pass.
    pub status: String,
}

// ------------------------------------------------------------------ files

/// vyre 0.6.5's wire format drops `BufferDecl::bytes_extraction`, without which the
/// validator rejects every load and store of a bytes buffer; the generator sets it on
/// exactly the bytes buffers, so set it back on those.
fn with_bytes_extraction_restored(program: &Program) -> Program {
    let buffers = program
        .buffers()
        .iter()
        .map(|decl| {
            let bytes = decl.element() == DataType::Bytes;
            decl.clone().with_bytes_extraction(bytes)
        })
        .collect();
    program.with_rewritten_buffers(buffers)
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(text: &str) -> Result<Vec<u8>, String> {
    let text = text.trim();
    if text.len() % 2 != 0 {
        return Err("odd number of hex digits".into());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

fn dims(v: Option<[u32; 3]>) -> String {
    match v {
        Some([x, y, z]) => format!("{x},{y},{z}"),
        None => "none".into(),
    }
}

fn parse_dims(text: &str) -> Result<Option<[u32; 3]>, String> {
    let text = text.trim();
    if text == "none" {
        return Ok(None);
    }
    let parts: Vec<u32> = text
        .split(',')
        .map(|p| p.trim().parse::<u32>().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    match parts.as_slice() {
        [x, y, z] => Ok(Some([*x, *y, *z])),
        _ => Err(format!("expected x,y,z, got {text:?}")),
    }
}

/// The file text for `case` (`comments` go first, each line prefixed with `# `).
pub fn render(case: &FuzzCase, kind: &str, status: &str, comments: &str) -> Result<String, String> {
    let wire = case.program.to_wire().map_err(|e| e.to_string())?;
    let mut out = String::new();
    out.push_str("# vyre-cuda fuzz regression case; tests/fuzz_regressions.rs replays it.\n");
    for line in comments.lines() {
        let _ = writeln!(out, "# {line}");
    }
    out.push_str("#\n");
    for line in pretty(&case.program).lines() {
        let _ = writeln!(out, "#   {line}");
    }
    for (i, input) in case.inputs.iter().enumerate() {
        let _ = writeln!(
            out,
            "#   input {i}: {}",
            describe_input(&case.program, i, input)
        );
    }
    let _ = writeln!(out, "kind: {kind}");
    let _ = writeln!(out, "status: {status}");
    let _ = writeln!(out, "seed: {:#x}", case.seed);
    let _ = writeln!(
        out,
        "workgroup-override: {}",
        dims(case.config.workgroup_override)
    );
    let _ = writeln!(out, "grid-override: {}", dims(case.config.grid_override));
    let _ = writeln!(
        out,
        "dispatch-elements: {}",
        case.config
            .dispatch_elements
            .map_or_else(|| "none".to_string(), |n| n.to_string())
    );
    let _ = writeln!(out, "program: {}", hex(&wire));
    for input in &case.inputs {
        let _ = writeln!(out, "input: {}", hex(input));
    }
    Ok(out)
}

/// Parse a regression file.
pub fn parse(path: &Path, text: &str) -> Result<SavedCase, String> {
    let mut kind = String::from("unknown");
    let mut status = String::from("fixed");
    let mut seed = 0u64;
    let mut program = None;
    let mut inputs = Vec::new();
    let mut config = DispatchConfig::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(format!(
                "{}:{}: expected `key: value`",
                path.display(),
                n + 1
            ));
        };
        let value = value.trim();
        let at = |e: String| format!("{}:{}: {e}", path.display(), n + 1);
        match key.trim() {
            "kind" => kind = value.to_string(),
            "status" => status = value.to_string(),
            "seed" => {
                seed = u64::from_str_radix(value.trim_start_matches("0x"), 16)
                    .map_err(|e| at(e.to_string()))?
            }
            "workgroup-override" => config.workgroup_override = parse_dims(value).map_err(at)?,
            "grid-override" => config.grid_override = parse_dims(value).map_err(at)?,
            "dispatch-elements" => {
                config.dispatch_elements = match value {
                    "none" => None,
                    n => Some(
                        n.parse()
                            .map_err(|e: std::num::ParseIntError| at(e.to_string()))?,
                    ),
                }
            }
            "program" => {
                let bytes = unhex(value).map_err(at)?;
                let decoded = Program::from_wire(&bytes).map_err(|e| at(e.to_string()))?;
                program = Some(with_bytes_extraction_restored(&decoded));
            }
            "input" => inputs.push(unhex(value).map_err(at)?),
            other => return Err(at(format!("unknown key `{other}`"))),
        }
    }
    let program = program.ok_or_else(|| format!("{}: no `program:` line", path.display()))?;
    Ok(SavedCase {
        path: path.to_path_buf(),
        case: FuzzCase {
            seed,
            program,
            inputs,
            config,
        },
        kind,
        status,
    })
}

/// Every `*.case` file in `dir`, sorted by name.
pub fn load_dir(dir: &Path) -> Result<Vec<SavedCase>, String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "case"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            parse(p, &text)
        })
        .collect()
}

/// The checked-in regression directory (`$VYRE_CUDA_FUZZ_REGRESSION_DIR` overrides it,
/// e.g. for test binaries copied to another machine).
pub fn regression_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("VYRE_CUDA_FUZZ_REGRESSION_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions")
}

/// Where newly found failures are written: `$VYRE_CUDA_FUZZ_SAVE_DIR`, else the
/// checked-in regression directory when it exists (a source checkout), else a temp dir.
pub fn save_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("VYRE_CUDA_FUZZ_SAVE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let dir = regression_dir();
    if dir.is_dir() {
        dir
    } else {
        std::env::temp_dir().join("vyre-cuda-fuzz-regressions")
    }
}

/// Write a failure to `<save_dir>/<name>.case` (not overwriting an existing file) and
/// return its path.
pub fn save(case: &FuzzCase, name: &str, kind: &str, comments: &str) -> Result<PathBuf, String> {
    let dir = save_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let text = render(case, kind, "open", comments)?;
    let mut path = dir.join(format!("{name}.case"));
    let mut n = 1;
    while path.exists() {
        n += 1;
        path = dir.join(format!("{name}-{n}.case"));
    }
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

// ------------------------------------------------------------------ pseudo-code

/// The program as readable pseudo-code (buffers, workgroup, statements).
pub fn pretty(program: &Program) -> String {
    let mut out = String::new();
    for decl in program.buffers().iter() {
        let role = if decl.access() == BufferAccess::Workgroup {
            "workgroup".to_string()
        } else if decl.is_output() {
            "output".to_string()
        } else {
            format!("{:?}", decl.access())
        };
        let _ = writeln!(
            out,
            "buffer {}: {role} {}[{}] binding {}",
            decl.name(),
            decl.element(),
            decl.count(),
            decl.binding()
        );
    }
    let _ = writeln!(out, "workgroup_size {:?}", program.workgroup_size());
    nodes(&mut out, program.entry(), 0);
    out
}

fn indent(out: &mut String, level: usize) {
    for _ in 0..level {
        out.push_str("  ");
    }
}

fn nodes(out: &mut String, list: &[Node], level: usize) {
    for node in list {
        self::node(out, node, level);
    }
}

fn node(out: &mut String, node: &Node, level: usize) {
    indent(out, level);
    match node {
        Node::Let { name, value } => {
            let _ = writeln!(out, "let {} = {};", &**name, expr(value));
        }
        Node::Assign { name, value } => {
            let _ = writeln!(out, "{} = {};", &**name, expr(value));
        }
        Node::Store {
            buffer,
            index,
            value,
        } => {
            let _ = writeln!(out, "{}[{}] = {};", &**buffer, expr(index), expr(value));
        }
        Node::If {
            cond,
            then,
            otherwise,
        } => {
            let _ = writeln!(out, "if {} {{", expr(cond));
            nodes(out, then, level + 1);
            if !otherwise.is_empty() {
                indent(out, level);
                out.push_str("} else {\n");
                nodes(out, otherwise, level + 1);
            }
            indent(out, level);
            out.push_str("}\n");
        }
        Node::Loop {
            var,
            from,
            to,
            body,
        } => {
            let _ = writeln!(out, "for {} in {}..{} {{", &**var, expr(from), expr(to));
            nodes(out, body, level + 1);
            indent(out, level);
            out.push_str("}\n");
        }
        Node::Return => out.push_str("return;\n"),
        Node::Barrier { ordering } => {
            let _ = writeln!(out, "barrier({ordering:?});");
        }
        Node::Block(body) => {
            out.push_str("{\n");
            nodes(out, body, level + 1);
            indent(out, level);
            out.push_str("}\n");
        }
        Node::Region {
            generator, body, ..
        } => {
            let _ = writeln!(out, "region {} {{", &**generator);
            nodes(out, body, level + 1);
            indent(out, level);
            out.push_str("}\n");
        }
        other => {
            let _ = writeln!(out, "{other:?};");
        }
    }
}

/// One expression in function-call notation.
pub fn expr(e: &Expr) -> String {
    match e {
        Expr::LitU32(v) if *v > 0xFFFF => format!("{v:#x}u"),
        Expr::LitU32(v) => format!("{v}u"),
        Expr::LitI32(v) => format!("{v}i"),
        Expr::LitF32(v) => format!("f32({:#010x}={v:?})", v.to_bits()),
        Expr::LitBool(v) => format!("{v}"),
        Expr::Var(name) => name.to_string(),
        Expr::Load { buffer, index } => format!("{}[{}]", &**buffer, expr(index)),
        Expr::BufLen { buffer } => format!("buflen({})", &**buffer),
        Expr::InvocationId { axis } => format!("gid.{}", axis_name(*axis)),
        Expr::WorkgroupId { axis } => format!("wgid.{}", axis_name(*axis)),
        Expr::LocalId { axis } => format!("lid.{}", axis_name(*axis)),
        Expr::BinOp { op, left, right } => {
            format!("{op:?}({}, {})", expr(left), expr(right))
        }
        Expr::UnOp { op, operand } => format!("{op:?}({})", expr(operand)),
        Expr::Select {
            cond,
            true_val,
            false_val,
        } => format!(
            "select({}, {}, {})",
            expr(cond),
            expr(true_val),
            expr(false_val)
        ),
        Expr::Cast { target, value } => format!("cast<{target}>({})", expr(value)),
        Expr::Fma { a, b, c } => format!("fma({}, {}, {})", expr(a), expr(b), expr(c)),
        Expr::Atomic {
            op,
            buffer,
            index,
            expected,
            value,
            ordering,
        } => match expected {
            Some(x) => format!(
                "atomic{op:?}<{ordering:?}>({}[{}], expected {}, {})",
                &**buffer,
                expr(index),
                expr(x),
                expr(value)
            ),
            None => format!(
                "atomic{op:?}<{ordering:?}>({}[{}], {})",
                &**buffer,
                expr(index),
                expr(value)
            ),
        },
        other => format!("{other:?}"),
    }
}

fn axis_name(axis: u8) -> String {
    match axis {
        0 => "x".into(),
        1 => "y".into(),
        2 => "z".into(),
        n => format!("axis{n}"),
    }
}

/// Input `index` decoded by its buffer's element type (first 64 elements).
pub fn describe_input(program: &Program, index: usize, bytes: &[u8]) -> String {
    let decl = program
        .buffers()
        .iter()
        .filter(|d| d.access() != BufferAccess::Workgroup && !d.is_backend_allocated_output())
        .nth(index);
    let Some(decl) = decl else {
        return format!("{} bytes", bytes.len());
    };
    format!(
        "{} = {}",
        decl.name(),
        describe_bytes(&decl.element(), bytes)
    )
}

/// Bytes decoded as `element`s (first 64).
pub fn describe_bytes(element: &DataType, bytes: &[u8]) -> String {
    let size = super::values::element_size(element);
    let items: Vec<String> = bytes
        .chunks(size)
        .take(64)
        .map(|c| {
            // An element over eight bytes shows its first eight.
            let mut w = [0u8; 8];
            let shown = c.len().min(8);
            w[..shown].copy_from_slice(&c[..shown]);
            let v = u64::from_le_bytes(w);
            match element {
                DataType::F32 => {
                    let f = f32::from_bits(v as u32);
                    format!("{f:?}({:#010x})", v as u32)
                }
                DataType::I32 => format!("{}", v as u32 as i32),
                DataType::U32 | DataType::Bool if v > 0xFFFF => format!("{v:#x}"),
                _ => format!("{v:#x}"),
            }
        })
        .collect();
    let more = if bytes.len() / size.max(1) > 64 {
        ", ..."
    } else {
        ""
    };
    format!(
        "{}[{}]{more} ({} bytes)",
        element,
        items.join(", "),
        bytes.len()
    )
}

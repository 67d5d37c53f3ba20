//! Which constructs a set of programs exercised (for the generator's coverage report).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::ControlFlow;
use vyre_foundation::ir::{BinOp, BufferAccess, DataType, Expr, Ident, Node, Program};
use vyre_foundation::visit::{visit_preorder, ExprVisitor};

/// Construct name -> number of occurrences.
#[derive(Debug, Default, Clone)]
pub struct Coverage {
    pub counts: BTreeMap<String, u64>,
}

impl Coverage {
    fn hit(&mut self, key: String) {
        *self.counts.entry(key).or_default() += 1;
    }

    pub fn merge(&mut self, other: &Coverage) {
        for (k, v) in &other.counts {
            *self.counts.entry(k.clone()).or_default() += v;
        }
    }

    pub fn add_program(&mut self, program: &Program) {
        let wg = program.workgroup_size();
        let dims = wg.iter().filter(|d| **d > 1).count();
        self.hit(format!("workgroup:{dims}d"));
        for decl in program.buffers().iter() {
            let role = if decl.access() == BufferAccess::Workgroup {
                "workgroup".to_string()
            } else if decl.is_output() {
                "output".to_string()
            } else {
                format!("{:?}", decl.access())
            };
            self.hit(format!("buffer:{role}:{}", decl.element()));
        }
        self.nodes(program.entry());
        // Once per program, so `issue17:*` counts are numbers of programs.
        for construct in unlowered_constructs(program) {
            self.hit(format!("issue17:{construct}"));
        }
    }

    fn nodes(&mut self, nodes: &[Node]) {
        for node in nodes {
            match node {
                Node::Let { value, .. } => {
                    self.hit("node:Let".into());
                    self.expr(value);
                }
                Node::Assign { value, .. } => {
                    self.hit("node:Assign".into());
                    self.expr(value);
                }
                Node::Store { index, value, .. } => {
                    self.hit("node:Store".into());
                    self.expr(index);
                    self.expr(value);
                }
                Node::If {
                    cond,
                    then,
                    otherwise,
                } => {
                    self.hit(if otherwise.is_empty() {
                        "node:If".into()
                    } else {
                        "node:IfElse".into()
                    });
                    self.expr(cond);
                    self.nodes(then);
                    self.nodes(otherwise);
                }
                Node::Loop { from, to, body, .. } => {
                    self.hit("node:Loop".into());
                    self.expr(from);
                    self.expr(to);
                    self.nodes(body);
                }
                Node::Return => self.hit("node:Return".into()),
                Node::AsyncLoad { offset, size, .. } | Node::AsyncStore { offset, size, .. } => {
                    self.hit(match node {
                        Node::AsyncLoad { .. } => "node:AsyncLoad".into(),
                        _ => "node:AsyncStore".into(),
                    });
                    self.expr(offset);
                    self.expr(size);
                }
                Node::AsyncWait { .. } => self.hit("node:AsyncWait".into()),
                Node::Barrier { .. } => self.hit("node:Barrier".into()),
                Node::Block(body) => {
                    self.hit("node:Block".into());
                    self.nodes(body);
                }
                Node::Region { body, .. } => {
                    self.hit("node:Region".into());
                    self.nodes(body);
                }
                other => self.hit(format!("node:{other:?}").chars().take(30).collect()),
            }
        }
    }

    fn expr(&mut self, e: &Expr) {
        match e {
            Expr::LitU32(_) => self.hit("expr:LitU32".into()),
            Expr::LitI32(_) => self.hit("expr:LitI32".into()),
            Expr::LitF32(_) => self.hit("expr:LitF32".into()),
            Expr::LitBool(_) => self.hit("expr:LitBool".into()),
            Expr::Var(_) => self.hit("expr:Var".into()),
            Expr::Load { index, .. } => {
                self.hit("expr:Load".into());
                self.expr(index);
            }
            Expr::BufLen { .. } => self.hit("expr:BufLen".into()),
            Expr::InvocationId { .. } => self.hit("expr:InvocationId".into()),
            Expr::WorkgroupId { .. } => self.hit("expr:WorkgroupId".into()),
            Expr::LocalId { .. } => self.hit("expr:LocalId".into()),
            Expr::BinOp { op, left, right } => {
                self.hit(format!("binop:{op:?}"));
                self.expr(left);
                self.expr(right);
            }
            Expr::UnOp { op, operand } => {
                self.hit(format!("unop:{op:?}"));
                self.expr(operand);
            }
            Expr::Select {
                cond,
                true_val,
                false_val,
            } => {
                self.hit("expr:Select".into());
                self.expr(cond);
                self.expr(true_val);
                self.expr(false_val);
            }
            Expr::Cast { target, value } => {
                self.hit(format!("cast:{target}"));
                self.expr(value);
            }
            Expr::Fma { a, b, c } => {
                self.hit("expr:Fma".into());
                self.expr(a);
                self.expr(b);
                self.expr(c);
            }
            Expr::Atomic {
                op,
                index,
                expected,
                value,
                ..
            } => {
                self.hit(format!("atomic:{op:?}"));
                self.expr(index);
                if let Some(x) = expected {
                    self.expr(x);
                }
                self.expr(value);
            }
            Expr::SubgroupBallot { cond } => {
                self.hit("subgroup:Ballot".into());
                self.expr(cond);
            }
            Expr::SubgroupShuffle { value, lane } => {
                self.hit("subgroup:Shuffle".into());
                self.expr(value);
                self.expr(lane);
            }
            Expr::SubgroupReduce { op, value } => {
                self.hit(format!("subgroup:Reduce{op:?}"));
                self.expr(value);
            }
            other => self.hit(format!("expr:{other:?}").chars().take(30).collect()),
        }
    }

    /// One line per construct family.
    pub fn summary(&self) -> String {
        let mut by_family: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (k, v) in &self.counts {
            let (family, name) = k.split_once(':').unwrap_or(("other", k));
            by_family
                .entry(family)
                .or_default()
                .push(format!("{name}={v}"));
        }
        by_family
            .iter()
            .map(|(f, items)| format!("  {f} ({}): {}", items.len(), items.join(" ")))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Every name [`unlowered_constructs`] reports, in report order.
pub const UNLOWERED: &[&str] = &[
    "subgroup:any",
    "subgroup:divergent-branch",
    "subgroup:loop-in-divergent-branch",
    "subgroup:after-return",
    "subgroup:changing-value",
    "bytes:index",
    "bytes:condition",
    "bytes:arithmetic",
    "bytes:comparison",
    "bytes:assign",
    "bytes:let-writable",
    "bytes:workgroup-buffer",
    "bytes:subgroup-operand",
    "async:split",
    "elements:raw-type-buffer",
    "barrier:data-dependent-branch",
    "subgroup:nested",
    "subgroup:nested-between-atomics",
    "elements:wide",
    "loop:guarded-branch",
    "subgroup:two-typed-variable",
    "subgroup:f64-lanes-shuffled",
];

/// The constructs of [`UNLOWERED`] in only about 2-3% of complete-shape programs (those
/// needing a buffer of the invocations' own atomic slots; a raw-type buffer of the one
/// wide element type of nine): a sweep expects them from 1000 programs on.
pub const RARE: &[&str] = &["subgroup:nested-between-atomics", "elements:wide"];

/// The constructs of issue 17 (what vyre-reference runs and the emitter did not lower;
/// README "Not yet lowered" lists what is still refused) that `program` contains, read off the IR itself (not the
/// generator's intent), so a sweep can report, per construct, how many programs held
/// it and how many of those the emitter rejected.
///
/// * `subgroup:any`: some subgroup operation;
/// * `subgroup:divergent-branch`: one inside an `If` whose condition is not built from
///   literals, workgroup ids and buffer lengths alone;
/// * `subgroup:loop-in-divergent-branch`: one in a `Loop` inside such an `If`;
/// * `subgroup:after-return`: one after (in program order) a `Return`;
/// * `subgroup:changing-value`: one whose operands read a variable the program assigns
///   or a buffer it writes;
/// * `bytes:index`, `bytes:condition`, `bytes:arithmetic` (operators and casts),
///   `bytes:comparison`, `bytes:assign`, `bytes:let-writable` (a `Let` of a load from a
///   writable bytes buffer), `bytes:workgroup-buffer`: the uses of a bytes load
///   ("view") the emitter rejects; `bytes:subgroup-operand`: a view as a subgroup
///   operation's condition, lane or value. (A select of a view and a fixed-size value, which
///   the README also lists, never passes vyre's validator: V029 or V023.)
/// * `async:split`: an async copy whose start and wait are not in one node list.
/// * `elements:raw-type-buffer`: a buffer of an element type whose loads are raw bytes
///   (8-bit float, 4-bit, handle, vector, array, device mesh, quantized).
/// * `barrier:data-dependent-branch`: a barrier inside an `If` whose condition is not
///   built from literals, workgroup ids and buffer lengths alone.
/// * `subgroup:nested`: a subgroup operand holding another subgroup operation;
///   `subgroup:nested-between-atomics`: one also holding two atomics on one buffer.
/// * `elements:wide`: a buffer of elements over 255 bytes (wider than registers hold).
/// * `subgroup:two-typed-variable`: a subgroup operand reading a variable that two `Let`s
///   bind (in sibling scopes: lanes may hold it with different types);
///   `subgroup:f64-lanes-shuffled`: a shuffle of such a variable that one of them binds
///   to a load of an f64 buffer (lanes holding an f32 receive f64 values whole);
/// * `loop:guarded-branch`: not one of issue 17's but a shape emitter v37 lowers its own
///   way (`lower::speculate`, straight-line): an `If` without `else` in a `Loop` whose
///   branch holds only `Let`/`Assign`/`Store` and loads.
pub fn unlowered_constructs(program: &Program) -> BTreeSet<&'static str> {
    let mut walk = Walk::default();
    for decl in program.buffers().iter() {
        let bytes = decl.element() == DataType::Bytes;
        if raw_element(&decl.element()) {
            walk.found.insert("elements:raw-type-buffer");
        }
        if decl.element().size_bytes().is_some_and(|size| size > 255) {
            walk.found.insert("elements:wide");
        }
        if bytes && decl.access() == BufferAccess::Workgroup {
            walk.found.insert("bytes:workgroup-buffer");
        }
        if decl.element() == DataType::F64 {
            walk.f64_buffers.insert(decl.name().to_string());
        }
        if bytes {
            let writable = !matches!(
                decl.access(),
                BufferAccess::ReadOnly | BufferAccess::Uniform
            );
            walk.bytes.insert(decl.name().to_string(), writable);
        }
    }
    walk.writes(program.entry());
    walk.lets(program.entry());
    walk.nodes(program.entry(), false, false);
    if guarded_branch_in_loop(program.entry(), false) {
        walk.found.insert("loop:guarded-branch");
    }
    for (starts, waits) in walk.tags.values() {
        if starts != waits || starts.is_empty() {
            walk.found.insert("async:split");
        }
    }
    walk.found
}

/// Whether `nodes` (inside a loop: `in_loop`) hold an `If` without `else` in a loop whose
/// branch is only `Let`/`Assign`/`Store` and loads something.
fn guarded_branch_in_loop(nodes: &[Node], in_loop: bool) -> bool {
    nodes.iter().any(|node| match node {
        Node::If {
            cond,
            then,
            otherwise,
        } => {
            let straight = then.iter().all(|n| {
                matches!(
                    n,
                    Node::Let { .. } | Node::Assign { .. } | Node::Store { .. }
                )
            });
            let loads = then.iter().any(|n| match n {
                Node::Let { value, .. } | Node::Assign { value, .. } => has_load(value),
                Node::Store { index, value, .. } => has_load(index) || has_load(value),
                _ => false,
            });
            (in_loop && otherwise.is_empty() && straight && (loads || has_load(cond)))
                || guarded_branch_in_loop(then, in_loop)
                || guarded_branch_in_loop(otherwise, in_loop)
        }
        Node::Loop { body, .. } => guarded_branch_in_loop(body, true),
        Node::Block(body) => guarded_branch_in_loop(body, in_loop),
        Node::Region { body, .. } => guarded_branch_in_loop(body, in_loop),
        _ => false,
    })
}

/// Whether `e` loads from a buffer.
fn has_load(e: &Expr) -> bool {
    struct FirstLoad;
    impl ExprVisitor for FirstLoad {
        type Break = ();
        fn visit_load(&mut self, _: &Expr, _: &Ident, _: &Expr) -> ControlFlow<()> {
            ControlFlow::Break(())
        }
    }
    visit_preorder(&mut FirstLoad, e).is_break()
}

/// An element type whose loads are raw bytes (8-bit floats, 4-bit types, handles,
/// vectors, arrays, device meshes, quantized), all refused by the emitter until 2026-11-29.
fn raw_element(element: &DataType) -> bool {
    matches!(
        element,
        DataType::F8E4M3
            | DataType::F8E5M2
            | DataType::I4
            | DataType::FP4
            | DataType::NF4
            | DataType::Handle(_)
            | DataType::Vec { .. }
            | DataType::Array { .. }
            | DataType::DeviceMesh { .. }
            | DataType::Quantized { .. }
    )
}

#[derive(Default)]
struct Walk {
    /// Bytes buffers -> writable.
    bytes: HashMap<String, bool>,
    /// Variables bound to a bytes view.
    views: HashSet<String>,
    assigned: HashSet<String>,
    written: HashSet<String>,
    /// Variables that two or more `Let`s bind.
    rebound: HashSet<String>,
    /// F64 buffers, and the variables some `Let` binds to a load of one.
    f64_buffers: HashSet<String>,
    f64_bound: HashSet<String>,
    bound: HashSet<String>,
    seen_return: bool,
    next_list: u32,
    /// Async tag -> (node lists of its starts, node lists of its waits).
    tags: BTreeMap<String, (BTreeSet<u32>, BTreeSet<u32>)>,
    found: BTreeSet<&'static str>,
}

/// Whether `e` reads one of `names` (outside nested subgroup operations too).
fn reads_any(e: &Expr, names: &HashSet<String>) -> bool {
    let any = |es: &[&Expr]| es.iter().any(|e| reads_any(e, names));
    match e {
        Expr::Var(name) => names.contains(name.as_str()),
        Expr::Load { index, .. } => any(&[index]),
        Expr::BinOp { left, right, .. } => any(&[left, right]),
        Expr::UnOp { operand, .. } => any(&[operand]),
        Expr::Cast { value, .. } => any(&[value]),
        Expr::Select {
            cond,
            true_val,
            false_val,
        } => any(&[cond, true_val, false_val]),
        Expr::Fma { a, b, c } => any(&[a, b, c]),
        Expr::SubgroupBallot { cond } => any(&[cond]),
        Expr::SubgroupShuffle { value, lane } => any(&[value, lane]),
        Expr::SubgroupReduce { value, .. } => any(&[value]),
        _ => false,
    }
}

/// Whether `operand` holds a subgroup operation, and whether two atomics on one buffer.
fn nesting(operand: &Expr) -> (bool, bool) {
    fn visit<'e>(e: &'e Expr, buffers: &mut Vec<&'e str>, nested: &mut bool) {
        let children: Vec<&Expr> = match e {
            Expr::SubgroupBallot { cond } => {
                *nested = true;
                vec![cond]
            }
            Expr::SubgroupShuffle { value, lane } => {
                *nested = true;
                vec![value, lane]
            }
            Expr::SubgroupReduce { value, .. } => {
                *nested = true;
                vec![value]
            }
            Expr::Atomic {
                buffer,
                index,
                expected,
                value,
                ..
            } => {
                buffers.push(buffer.as_str());
                [index, value]
                    .into_iter()
                    .chain(expected)
                    .map(|x| &**x)
                    .collect()
            }
            Expr::Load { index, .. } => vec![index],
            Expr::BinOp { left, right, .. } => vec![left, right],
            Expr::UnOp { operand, .. } => vec![operand],
            Expr::Cast { value, .. } => vec![value],
            Expr::Select {
                cond,
                true_val,
                false_val,
            } => vec![cond, true_val, false_val],
            Expr::Fma { a, b, c } => vec![a, b, c],
            _ => Vec::new(),
        };
        for child in children {
            visit(child, buffers, nested);
        }
    }
    let (mut buffers, mut nested) = (Vec::new(), false);
    visit(operand, &mut buffers, &mut nested);
    buffers.sort_unstable();
    (nested, buffers.windows(2).any(|pair| pair[0] == pair[1]))
}

fn is_compare(op: &BinOp) -> bool {
    matches!(
        op,
        BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Gt | BinOp::Le | BinOp::Ge
    )
}

/// Built from literals, workgroup ids and buffer lengths only: the same for every
/// invocation of a workgroup.
/// Whether a barrier is among `nodes` or nested in them.
fn holds_barrier(nodes: &[Node]) -> bool {
    nodes.iter().any(|node| match node {
        Node::Barrier { .. } => true,
        Node::If {
            then, otherwise, ..
        } => holds_barrier(then) || holds_barrier(otherwise),
        Node::Loop { body, .. } | Node::Block(body) => holds_barrier(body),
        Node::Region { body, .. } => holds_barrier(body),
        _ => false,
    })
}

fn uniform(e: &Expr) -> bool {
    match e {
        Expr::LitU32(_)
        | Expr::LitI32(_)
        | Expr::LitF32(_)
        | Expr::LitBool(_)
        | Expr::WorkgroupId { .. }
        | Expr::BufLen { .. } => true,
        Expr::BinOp { left, right, .. } => uniform(left) && uniform(right),
        Expr::UnOp { operand, .. } => uniform(operand),
        Expr::Cast { value, .. } => uniform(value),
        Expr::Select {
            cond,
            true_val,
            false_val,
        } => uniform(cond) && uniform(true_val) && uniform(false_val),
        _ => false,
    }
}

impl Walk {
    /// Variables assigned and buffers written anywhere in `nodes`.
    fn lets(&mut self, nodes: &[Node]) {
        for node in nodes {
            match node {
                Node::Let { name, value } => {
                    if matches!(value, Expr::Load { buffer, .. } if self.f64_buffers.contains(buffer.as_str()))
                    {
                        self.f64_bound.insert(name.to_string());
                    }
                    self.bind(name)
                }
                Node::Loop { var, body, .. } => {
                    self.bind(var);
                    self.lets(body);
                }
                Node::If {
                    then, otherwise, ..
                } => {
                    self.lets(then);
                    self.lets(otherwise);
                }
                Node::Block(body) => self.lets(body),
                Node::Region { body, .. } => self.lets(body),
                _ => {}
            }
        }
    }

    fn bind(&mut self, name: &str) {
        if !self.bound.insert(name.to_string()) {
            self.rebound.insert(name.to_string());
        }
    }

    fn writes(&mut self, nodes: &[Node]) {
        for node in nodes {
            match node {
                Node::Assign { name, .. } => {
                    self.assigned.insert(name.to_string());
                }
                Node::Store { buffer, .. } => {
                    self.written.insert(buffer.to_string());
                }
                Node::AsyncLoad { destination, .. } | Node::AsyncStore { destination, .. } => {
                    self.written.insert(destination.to_string());
                }
                Node::If {
                    then, otherwise, ..
                } => {
                    self.writes(then);
                    self.writes(otherwise);
                }
                Node::Loop { body, .. } | Node::Block(body) => self.writes(body),
                Node::Region { body, .. } => self.writes(body),
                _ => {}
            }
        }
    }

    /// A run-time-sized bytes value: a load from a bytes buffer or what carries one.
    fn is_view(&self, e: &Expr) -> bool {
        match e {
            Expr::Load { buffer, .. } => self.bytes.contains_key(buffer.as_str()),
            Expr::Var(name) => self.views.contains(name.as_str()),
            Expr::Cast {
                target: DataType::Bytes,
                value,
            } => self.is_view(value),
            Expr::Select {
                true_val,
                false_val,
                ..
            } => self.is_view(true_val) && self.is_view(false_val),
            _ => false,
        }
    }

    /// Whether `e` reads a changing variable or a written buffer.
    fn changes(&self, e: &Expr) -> bool {
        match e {
            Expr::Var(name) => self.assigned.contains(name.as_str()),
            Expr::Load { buffer, index } => {
                self.written.contains(buffer.as_str()) || self.changes(index)
            }
            Expr::Atomic { .. } => true,
            Expr::BinOp { left, right, .. } => self.changes(left) || self.changes(right),
            Expr::UnOp { operand, .. } => self.changes(operand),
            Expr::Cast { value, .. } => self.changes(value),
            Expr::Select {
                cond,
                true_val,
                false_val,
            } => self.changes(cond) || self.changes(true_val) || self.changes(false_val),
            Expr::Fma { a, b, c } => self.changes(a) || self.changes(b) || self.changes(c),
            Expr::SubgroupBallot { cond } => self.changes(cond),
            Expr::SubgroupShuffle { value, lane } => self.changes(value) || self.changes(lane),
            Expr::SubgroupReduce { value, .. } => self.changes(value),
            _ => false,
        }
    }

    fn nodes(&mut self, nodes: &[Node], divergent: bool, loop_in_divergent: bool) {
        self.next_list += 1;
        let list = self.next_list;
        for node in nodes {
            let ex = |w: &mut Self, e: &Expr| w.expr(e, divergent, loop_in_divergent);
            match node {
                Node::Let { name, value } => {
                    ex(self, value);
                    if let Expr::Load { buffer, .. } = value {
                        if self.bytes.get(buffer.as_str()) == Some(&true) {
                            self.found.insert("bytes:let-writable");
                        }
                    }
                    if self.is_view(value) {
                        self.views.insert(name.to_string());
                    }
                }
                Node::Assign { name, value } => {
                    ex(self, value);
                    if self.is_view(value) {
                        self.found.insert("bytes:assign");
                        self.views.insert(name.to_string());
                    }
                }
                Node::Store { index, value, .. } => {
                    if self.is_view(index) {
                        self.found.insert("bytes:index");
                    }
                    ex(self, index);
                    ex(self, value);
                }
                Node::If {
                    cond,
                    then,
                    otherwise,
                } => {
                    if self.is_view(cond) {
                        self.found.insert("bytes:condition");
                    }
                    ex(self, cond);
                    let inner = divergent || !uniform(cond);
                    if inner && (holds_barrier(then) || holds_barrier(otherwise)) {
                        self.found.insert("barrier:data-dependent-branch");
                    }
                    self.nodes(then, inner, loop_in_divergent);
                    self.nodes(otherwise, inner, loop_in_divergent);
                }
                Node::Loop { from, to, body, .. } => {
                    ex(self, from);
                    ex(self, to);
                    self.nodes(body, divergent, loop_in_divergent || divergent);
                }
                Node::Block(body) => self.nodes(body, divergent, loop_in_divergent),
                Node::Region { body, .. } => self.nodes(body, divergent, loop_in_divergent),
                Node::Return => self.seen_return = true,
                Node::AsyncLoad {
                    offset, size, tag, ..
                }
                | Node::AsyncStore {
                    offset, size, tag, ..
                } => {
                    ex(self, offset);
                    ex(self, size);
                    self.tags.entry(tag.to_string()).or_default().0.insert(list);
                }
                Node::AsyncWait { tag } => {
                    self.tags.entry(tag.to_string()).or_default().1.insert(list);
                }
                _ => {}
            }
        }
    }

    fn expr(&mut self, e: &Expr, divergent: bool, loop_in_divergent: bool) {
        let sub = |w: &mut Self, e: &Expr| w.expr(e, divergent, loop_in_divergent);
        match e {
            Expr::SubgroupBallot { .. }
            | Expr::SubgroupShuffle { .. }
            | Expr::SubgroupReduce { .. } => {
                self.found.insert("subgroup:any");
                if divergent {
                    self.found.insert("subgroup:divergent-branch");
                }
                if loop_in_divergent {
                    self.found.insert("subgroup:loop-in-divergent-branch");
                }
                if self.seen_return {
                    self.found.insert("subgroup:after-return");
                }
                if self.changes(e) {
                    self.found.insert("subgroup:changing-value");
                }
                let operands: Vec<&Expr> = match e {
                    Expr::SubgroupBallot { cond } => vec![cond],
                    Expr::SubgroupShuffle { value, lane } => vec![value, lane],
                    Expr::SubgroupReduce { value, .. } => vec![value],
                    _ => Vec::new(),
                };
                if operands.iter().any(|operand| self.is_view(operand)) {
                    self.found.insert("bytes:subgroup-operand");
                }
                if (operands.iter()).any(|operand| reads_any(operand, &self.rebound)) {
                    self.found.insert("subgroup:two-typed-variable");
                }
                if let Expr::SubgroupShuffle { value, .. } = e {
                    let wide: HashSet<String> = self
                        .rebound
                        .intersection(&self.f64_bound)
                        .cloned()
                        .collect();
                    if reads_any(value, &wide) {
                        self.found.insert("subgroup:f64-lanes-shuffled");
                    }
                }
                for operand in &operands {
                    let (nested, two_atomics_on_one_buffer) = nesting(operand);
                    if nested {
                        self.found.insert("subgroup:nested");
                    }
                    if nested && two_atomics_on_one_buffer {
                        self.found.insert("subgroup:nested-between-atomics");
                    }
                }
                match e {
                    Expr::SubgroupBallot { cond } => sub(self, cond),
                    Expr::SubgroupShuffle { value, lane } => {
                        sub(self, value);
                        sub(self, lane);
                    }
                    Expr::SubgroupReduce { value, .. } => sub(self, value),
                    _ => {}
                }
            }
            Expr::Load { index, .. } => {
                if self.is_view(index) {
                    self.found.insert("bytes:index");
                }
                sub(self, index);
            }
            Expr::Atomic {
                index,
                expected,
                value,
                ..
            } => {
                if self.is_view(index) {
                    self.found.insert("bytes:index");
                }
                sub(self, index);
                if let Some(x) = expected {
                    sub(self, x);
                }
                sub(self, value);
            }
            Expr::BinOp { op, left, right } => {
                if self.is_view(left) || self.is_view(right) {
                    self.found.insert(if is_compare(op) {
                        "bytes:comparison"
                    } else {
                        "bytes:arithmetic"
                    });
                }
                sub(self, left);
                sub(self, right);
            }
            Expr::UnOp { operand, .. } => {
                if self.is_view(operand) {
                    self.found.insert("bytes:arithmetic");
                }
                sub(self, operand);
            }
            Expr::Cast { target, value } => {
                if *target != DataType::Bytes && self.is_view(value) {
                    self.found.insert("bytes:arithmetic");
                }
                sub(self, value);
            }
            Expr::Select {
                cond,
                true_val,
                false_val,
            } => {
                if self.is_view(cond) {
                    self.found.insert("bytes:condition");
                }
                sub(self, cond);
                sub(self, true_val);
                sub(self, false_val);
            }
            Expr::Fma { a, b, c } => {
                sub(self, a);
                sub(self, b);
                sub(self, c);
            }
            _ => {}
        }
    }
}

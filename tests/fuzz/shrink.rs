//! Test-case minimisation: greedily apply smaller edits to a failing case while the
//! caller's predicate says the failure persists.
//!
//! Edits, repeated until none applies: delete a statement; replace an `If`/`Loop`/`Block`/
//! `Region` by its body; replace an expression by one of its operands or by a literal;
//! simplify literals to 0/1; drop unused buffers; halve buffer lengths; zero input
//! elements; shrink the workgroup. Every accepted edit strictly decreases
//! [`measure`], so shrinking terminates; the predicate decides validity (it should
//! reject drafts that vyre's validator rejects or whose result depends on lane order).

use super::case::FuzzCase;
use super::values::element_size;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vyre_foundation::ir::{BufferAccess, BufferDecl, Expr, Node, Program};

/// Limits on one shrink.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub max_evaluations: u32,
    pub max_time: Duration,
    /// Never edit the index of a store, an atomic, or a load from a read-write, output
    /// or workgroup buffer, nor the `lin`/`lid` bindings, never delete a barrier, and
    /// never shrink the workgroup. Generated programs touch
    /// those buffers only at the invocation's own slots; an edited index (say `lin * 2`
    /// -> `2`) makes invocations race, which the reference's one-lane-at-a-time order
    /// hides even when run lane-reversed. Set for GPU shrinking.
    pub freeze_own_indices: bool,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_evaluations: 4000,
            max_time: Duration::from_secs(60),
            freeze_own_indices: false,
        }
    }
}

/// What a shrink did.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub evaluations: u32,
    pub accepted: u32,
    pub before: (u64, u64, u64, u64, u64),
    pub after: (u64, u64, u64, u64, u64),
}

/// The editable form of a case.
#[derive(Clone)]
struct Work {
    seed: u64,
    buffers: Vec<BufferDecl>,
    workgroup: [u32; 3],
    entry: Vec<Node>,
    /// The entry was the `vyre.program.root` region of `Program::wrapped`.
    wrapped: bool,
    inputs: Vec<Vec<u8>>,
    config: vyre_driver::DispatchConfig,
}

impl Work {
    fn from_case(case: &FuzzCase) -> Self {
        let (entry, wrapped) = match case.program.entry() {
            [Node::Region {
                generator, body, ..
            }] if generator.as_str() == "vyre.program.root" => ((**body).clone(), true),
            other => (other.to_vec(), false),
        };
        Self {
            seed: case.seed,
            buffers: case.program.buffers().to_vec(),
            workgroup: case.program.workgroup_size(),
            entry,
            wrapped,
            inputs: case.inputs.clone(),
            config: case.config.clone(),
        }
    }

    #[allow(deprecated)]
    fn to_case(&self) -> FuzzCase {
        let program = if self.wrapped {
            Program::wrapped(self.buffers.clone(), self.workgroup, self.entry.clone())
        } else {
            Program::from_raw_parts(self.buffers.clone(), self.workgroup, self.entry.clone())
        };
        FuzzCase {
            seed: self.seed,
            program,
            inputs: self.inputs.clone(),
            config: self.config.clone(),
        }
    }
}

/// The size a shrink minimises: (statements + expressions, literal complexity, buffer
/// elements, workgroup invocations, non-zero input bytes), compared lexicographically.
pub fn measure(case: &FuzzCase) -> (u64, u64, u64, u64, u64) {
    let work = Work::from_case(case);
    measure_work(&work)
}

fn measure_work(w: &Work) -> (u64, u64, u64, u64, u64) {
    let mut structural = 0u64;
    let mut literal = 0u64;
    for node in &w.entry {
        node_size(node, &mut structural, &mut literal);
    }
    let elements: u64 = w.buffers.iter().map(|b| u64::from(b.count())).sum::<u64>()
        + w.inputs.iter().map(|i| i.len() as u64).sum::<u64>()
        + w.buffers.len() as u64 * 4;
    let threads = w.workgroup.iter().map(|d| u64::from(*d)).product();
    let nonzero = w
        .inputs
        .iter()
        .map(|i| i.iter().filter(|b| **b != 0).count() as u64)
        .sum();
    (structural, literal, elements, threads, nonzero)
}

fn node_size(node: &Node, structural: &mut u64, literal: &mut u64) {
    *structural += 1;
    match node {
        Node::Let { value, .. } | Node::Assign { value, .. } => {
            expr_size(value, structural, literal)
        }
        Node::Store { index, value, .. } => {
            expr_size(index, structural, literal);
            expr_size(value, structural, literal);
        }
        Node::If {
            cond,
            then,
            otherwise,
        } => {
            expr_size(cond, structural, literal);
            for n in then.iter().chain(otherwise) {
                node_size(n, structural, literal);
            }
        }
        Node::Loop { from, to, body, .. } => {
            expr_size(from, structural, literal);
            expr_size(to, structural, literal);
            for n in body {
                node_size(n, structural, literal);
            }
        }
        Node::Block(body) => body.iter().for_each(|n| node_size(n, structural, literal)),
        Node::Region { body, .. } => body.iter().for_each(|n| node_size(n, structural, literal)),
        _ => {}
    }
}

fn literal_weight(e: &Expr) -> u64 {
    match e {
        Expr::LitU32(0) | Expr::LitI32(0) | Expr::LitBool(false) => 0,
        Expr::LitF32(v) if v.to_bits() == 0 => 0,
        Expr::LitU32(1) | Expr::LitI32(1) | Expr::LitBool(true) => 1,
        Expr::LitF32(v) if *v == 1.0 => 1,
        Expr::LitU32(_) | Expr::LitI32(_) | Expr::LitF32(_) => 2,
        _ => 3,
    }
}

fn expr_size(e: &Expr, structural: &mut u64, literal: &mut u64) {
    *structural += 1;
    let mut children = Vec::new();
    expr_children(e, &mut children);
    if children.is_empty() {
        *literal += literal_weight(e);
    }
    for c in children {
        expr_size(c, structural, literal);
    }
}

fn expr_children<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::Load { index, .. } => out.push(index),
        Expr::BinOp { left, right, .. } => {
            out.push(left);
            out.push(right);
        }
        Expr::UnOp { operand, .. } => out.push(operand),
        Expr::Select {
            cond,
            true_val,
            false_val,
        } => {
            out.push(cond);
            out.push(true_val);
            out.push(false_val);
        }
        Expr::Cast { value, .. } => out.push(value),
        Expr::Fma { a, b, c } => {
            out.push(a);
            out.push(b);
            out.push(c);
        }
        Expr::Atomic {
            index,
            expected,
            value,
            ..
        } => {
            out.push(index);
            if let Some(x) = expected {
                out.push(x);
            }
            out.push(value);
        }
        Expr::Call { args, .. } => out.extend(args.iter()),
        Expr::SubgroupBallot { cond } => out.push(cond),
        Expr::SubgroupShuffle { value, lane } => {
            out.push(value);
            out.push(lane);
        }
        Expr::SubgroupReduce { value, .. } => out.push(value),
        _ => {}
    }
}

// ------------------------------------------------------------------ tree editing

/// Calls `f` on the `n`-th statement list (pre-order: the entry is list 0).
fn with_list(nodes: &mut Vec<Node>, n: &mut usize, f: &mut dyn FnMut(&mut Vec<Node>)) -> bool {
    if *n == 0 {
        f(nodes);
        return true;
    }
    *n -= 1;
    for node in nodes.iter_mut() {
        let done = match node {
            Node::If {
                then, otherwise, ..
            } => with_list(then, n, f) || with_list(otherwise, n, f),
            Node::Loop { body, .. } | Node::Block(body) => with_list(body, n, f),
            Node::Region { body, .. } => with_list(Arc::make_mut(body), n, f),
            _ => false,
        };
        if done {
            return true;
        }
    }
    false
}

fn count_lists(nodes: &[Node]) -> usize {
    1 + nodes
        .iter()
        .map(|node| match node {
            Node::If {
                then, otherwise, ..
            } => count_lists(then) + count_lists(otherwise),
            Node::Loop { body, .. } | Node::Block(body) => count_lists(body),
            Node::Region { body, .. } => count_lists(body),
            _ => 0,
        })
        .sum::<usize>()
}

fn list_len(nodes: &mut Vec<Node>, n: usize) -> usize {
    let mut len = 0;
    let mut k = n;
    with_list(nodes, &mut k, &mut |l| len = l.len());
    len
}

/// Which expressions the search may edit.
#[derive(Clone, Copy)]
struct Scope<'a> {
    /// Buffers whose load indices must not change (they select an invocation's own
    /// slot; editing them can introduce cross-invocation races the reference's
    /// sequential order hides). When set, store and atomic indices are frozen too.
    frozen: Option<&'a std::collections::BTreeSet<String>>,
}

/// Calls `f(expr, in_loop_bound)` on the `n`-th editable expression (pre-order over
/// statements, then operands).
fn with_expr(
    nodes: &mut [Node],
    n: &mut usize,
    scope: Scope<'_>,
    f: &mut dyn FnMut(&mut Expr, bool),
) -> bool {
    let frozen_index = scope.frozen.is_some();
    for node in nodes.iter_mut() {
        let done = match node {
            // `lin` / `lid` index the invocation's own slots: frozen with the indices.
            Node::Let { name, .. } if frozen_index && is_slot_var(name) => false,
            Node::Let { value, .. } | Node::Assign { value, .. } => {
                in_expr(value, n, scope, false, f)
            }
            Node::Store { index, value, .. } => {
                (!frozen_index && in_expr(index, n, scope, false, f))
                    || in_expr(value, n, scope, false, f)
            }
            Node::If {
                cond,
                then,
                otherwise,
            } => {
                in_expr(cond, n, scope, false, f)
                    || with_expr(then, n, scope, f)
                    || with_expr(otherwise, n, scope, f)
            }
            Node::Loop { from, to, body, .. } => {
                in_expr(from, n, scope, true, f)
                    || in_expr(to, n, scope, true, f)
                    || with_expr(body, n, scope, f)
            }
            Node::Block(body) => with_expr(body, n, scope, f),
            Node::Region { body, .. } => with_expr(Arc::make_mut(body).as_mut_slice(), n, scope, f),
            _ => false,
        };
        if done {
            return true;
        }
    }
    false
}

fn in_expr(
    e: &mut Expr,
    n: &mut usize,
    scope: Scope<'_>,
    bound: bool,
    f: &mut dyn FnMut(&mut Expr, bool),
) -> bool {
    if *n == 0 {
        f(e, bound);
        return true;
    }
    *n -= 1;
    let mut go = |e: &mut Expr, n: &mut usize| in_expr(e, n, scope, bound, f);
    match e {
        Expr::Load { buffer, index } => {
            let frozen = scope
                .frozen
                .is_some_and(|set| set.contains(buffer.as_str()));
            !frozen && go(index, n)
        }
        Expr::BinOp { left, right, .. } => go(left, n) || go(right, n),
        Expr::UnOp { operand, .. } => go(operand, n),
        Expr::Select {
            cond,
            true_val,
            false_val,
        } => go(cond, n) || go(true_val, n) || go(false_val, n),
        Expr::Cast { value, .. } => go(value, n),
        Expr::Fma { a, b, c } => go(a, n) || go(b, n) || go(c, n),
        Expr::Atomic {
            index,
            expected,
            value,
            ..
        } => {
            (scope.frozen.is_none() && go(index, n))
                || expected.as_deref_mut().is_some_and(|x| go(x, n))
                || go(value, n)
        }
        _ => false,
    }
}

/// The generator's per-invocation slot variables.
fn is_slot_var(name: &str) -> bool {
    matches!(name, "lin" | "lid")
}

fn get_expr(nodes: &mut [Node], n: usize, scope: Scope<'_>) -> Option<(Expr, bool)> {
    let mut out = None;
    let mut k = n;
    with_expr(nodes, &mut k, scope, &mut |e, bound| {
        out = Some((e.clone(), bound))
    });
    out
}

fn buffer_used(nodes: &[Node], name: &str) -> bool {
    fn in_e(e: &Expr, name: &str) -> bool {
        let direct = match e {
            Expr::Load { buffer, .. } | Expr::BufLen { buffer } | Expr::Atomic { buffer, .. } => {
                buffer.as_str() == name
            }
            _ => false,
        };
        let mut children = Vec::new();
        expr_children(e, &mut children);
        direct || children.into_iter().any(|c| in_e(c, name))
    }
    nodes.iter().any(|node| match node {
        Node::Let { value, .. } | Node::Assign { value, .. } => in_e(value, name),
        Node::Store {
            buffer,
            index,
            value,
        } => buffer.as_str() == name || in_e(index, name) || in_e(value, name),
        Node::If {
            cond,
            then,
            otherwise,
        } => in_e(cond, name) || buffer_used(then, name) || buffer_used(otherwise, name),
        Node::Loop { from, to, body, .. } => {
            in_e(from, name) || in_e(to, name) || buffer_used(body, name)
        }
        Node::Block(body) => buffer_used(body, name),
        Node::Region { body, .. } => buffer_used(body, name),
        _ => true,
    })
}

/// Index of `decl`'s input slice, if it consumes one.
fn input_slot(buffers: &[BufferDecl], decl: usize) -> Option<usize> {
    let takes =
        |d: &BufferDecl| d.access() != BufferAccess::Workgroup && !d.is_backend_allocated_output();
    takes(&buffers[decl]).then(|| buffers[..decl].iter().filter(|d| takes(d)).count())
}

// ------------------------------------------------------------------ the search

struct Search<'p> {
    still_fails: &'p mut dyn FnMut(&FuzzCase) -> bool,
    budget: Budget,
    start: Instant,
    stats: Stats,
}

impl Search<'_> {
    fn exhausted(&self) -> bool {
        self.stats.evaluations >= self.budget.max_evaluations
            || self.start.elapsed() >= self.budget.max_time
    }

    /// Accept `candidate` if it is smaller and still fails.
    fn attempt(&mut self, current: &mut Work, candidate: Work) -> bool {
        if self.exhausted() || measure_work(&candidate) >= measure_work(current) {
            return false;
        }
        self.stats.evaluations += 1;
        let case = candidate.to_case();
        if (self.still_fails)(&case) {
            *current = candidate;
            self.stats.accepted += 1;
            true
        } else {
            false
        }
    }

    fn statements(&mut self, w: &mut Work) -> bool {
        let mut progress = false;
        let mut list = 0;
        while list < count_lists(&w.entry) && !self.exhausted() {
            let mut i = list_len(&mut w.entry, list);
            while i > 0 && !self.exhausted() {
                i -= 1;
                // Delete statement i (never a barrier or the `lin`/`lid` binding when
                // indices are frozen: the reference's lockstep stepping would hide the
                // race that opens).
                let mut is_barrier = false;
                let mut k = list;
                with_list(&mut w.entry, &mut k, &mut |l| {
                    is_barrier = match l.get(i) {
                        Some(Node::Barrier { .. }) => true,
                        Some(Node::Let { name, .. }) => is_slot_var(name),
                        _ => false,
                    };
                });
                if is_barrier && self.budget.freeze_own_indices {
                    continue;
                }
                let mut c = w.clone();
                let mut k = list;
                with_list(&mut c.entry, &mut k, &mut |l| {
                    if i < l.len() {
                        l.remove(i);
                    }
                });
                if self.attempt(w, c) {
                    progress = true;
                    continue;
                }
                // Replace it by its body (or branch).
                for branch in 0..2 {
                    let mut c = w.clone();
                    let mut k = list;
                    let mut changed = false;
                    with_list(&mut c.entry, &mut k, &mut |l| {
                        if i >= l.len() {
                            return;
                        }
                        let replacement = match (&l[i], branch) {
                            (Node::If { then, .. }, 0) => Some(then.clone()),
                            (Node::If { otherwise, .. }, 1) => Some(otherwise.clone()),
                            (
                                Node::Loop {
                                    var, from, body, ..
                                },
                                0,
                            ) => {
                                let mut v = vec![Node::Let {
                                    name: var.clone(),
                                    value: from.clone(),
                                }];
                                v.extend(body.iter().cloned());
                                Some(v)
                            }
                            (Node::Block(body), 0) => Some(body.clone()),
                            (Node::Region { body, .. }, 0) => Some((**body).clone()),
                            _ => None,
                        };
                        if let Some(r) = replacement {
                            l.splice(i..=i, r);
                            changed = true;
                        }
                    });
                    if changed && self.attempt(w, c) {
                        progress = true;
                        break;
                    }
                }
                i = i.min(list_len(&mut w.entry, list));
            }
            list += 1;
        }
        progress
    }

    fn expressions(&mut self, w: &mut Work) -> bool {
        let mut progress = false;
        let mut n = 0;
        let frozen = self.budget.freeze_own_indices.then(|| {
            w.buffers
                .iter()
                .filter(|d| {
                    d.access() == BufferAccess::Workgroup
                        || d.is_backend_allocated_output()
                        || d.access() == BufferAccess::ReadWrite
                })
                .map(|d| d.name().to_string())
                .collect::<std::collections::BTreeSet<_>>()
        });
        let scope = Scope {
            frozen: frozen.as_ref(),
        };
        loop {
            if self.exhausted() {
                break;
            }
            let Some((e, bound)) = get_expr(&mut w.entry, n, scope) else {
                break;
            };
            let mut candidates: Vec<Expr> = Vec::new();
            if bound {
                // Loop bounds only shrink to literals: an operand could be a huge count.
                candidates.extend([Expr::LitU32(0), Expr::LitU32(1)]);
            } else {
                let mut children = Vec::new();
                expr_children(&e, &mut children);
                candidates.extend(children.into_iter().cloned());
                candidates.extend([
                    Expr::LitU32(0),
                    Expr::LitU32(1),
                    Expr::LitI32(0),
                    Expr::LitI32(1),
                    Expr::LitF32(0.0),
                    Expr::LitF32(1.0),
                    Expr::LitBool(false),
                    Expr::LitBool(true),
                ]);
            }
            let mut accepted = false;
            for candidate in candidates {
                let mut c = w.clone();
                let mut k = n;
                with_expr(&mut c.entry, &mut k, scope, &mut |slot, _| {
                    *slot = candidate.clone()
                });
                if self.attempt(w, c) {
                    progress = true;
                    accepted = true;
                    break;
                }
            }
            if !accepted {
                n += 1;
            }
        }
        progress
    }

    fn buffers(&mut self, w: &mut Work) -> bool {
        let mut progress = false;
        // Drop unused buffers.
        let mut d = w.buffers.len();
        while d > 0 && !self.exhausted() {
            d -= 1;
            if buffer_used(&w.entry, w.buffers[d].name()) {
                continue;
            }
            let mut c = w.clone();
            if let Some(slot) = input_slot(&c.buffers, d) {
                c.inputs.remove(slot);
            }
            c.buffers.remove(d);
            progress |= self.attempt(w, c);
        }
        // Halve lengths (declared count and input together).
        for d in 0..w.buffers.len() {
            loop {
                if self.exhausted() {
                    break;
                }
                let decl = w.buffers[d].clone();
                let size = element_size(&decl.element());
                let slot = input_slot(&w.buffers, d);
                // A case without inputs (the emitter-panic shrinker's) halves the count.
                let current = (slot.and_then(|s| w.inputs.get(s)))
                    .map_or(decl.count() as usize, |input| input.len() / size.max(1));
                if current <= 1 {
                    break;
                }
                let half = current / 2;
                let mut c = w.clone();
                if decl.count() != 0 {
                    c.buffers[d] = decl
                        .clone()
                        .with_count((decl.count() as usize).min(half) as u32);
                }
                if let Some(input) = slot.and_then(|s| c.inputs.get_mut(s)) {
                    input.truncate(half * size);
                }
                if !self.attempt(w, c) {
                    break;
                }
                progress = true;
            }
        }
        progress
    }

    fn inputs(&mut self, w: &mut Work) -> bool {
        let mut progress = false;
        for s in 0..w.inputs.len() {
            // Zero halves, then quarters, ..., then single bytes.
            let mut chunk = w.inputs[s].len().next_power_of_two().max(1);
            while chunk >= 1 && !self.exhausted() {
                let mut start = 0;
                while start < w.inputs[s].len() && !self.exhausted() {
                    let end = (start + chunk).min(w.inputs[s].len());
                    if w.inputs[s][start..end].iter().any(|b| *b != 0) {
                        let mut c = w.clone();
                        c.inputs[s][start..end].fill(0);
                        progress |= self.attempt(w, c);
                    }
                    start = end;
                }
                chunk /= 2;
            }
        }
        progress
    }

    fn workgroup(&mut self, w: &mut Work) -> bool {
        let mut progress = false;
        if self.budget.freeze_own_indices {
            // A new shape changes the grid `lin` was computed for.
            return false;
        }
        let mut c = w.clone();
        c.workgroup = [1, 1, 1];
        progress |= self.attempt(w, c);
        for axis in 0..3 {
            while w.workgroup[axis] > 1 && !self.exhausted() {
                let mut c = w.clone();
                c.workgroup[axis] /= 2;
                if !self.attempt(w, c) {
                    break;
                }
                progress = true;
            }
        }
        progress
    }
}

/// Minimise `case` while `still_fails` holds (it must hold for `case` itself).
pub fn shrink(
    case: &FuzzCase,
    still_fails: &mut dyn FnMut(&FuzzCase) -> bool,
    budget: Budget,
) -> (FuzzCase, Stats) {
    let mut w = Work::from_case(case);
    let mut search = Search {
        still_fails,
        budget,
        start: Instant::now(),
        stats: Stats {
            before: measure_work(&Work::from_case(case)),
            ..Stats::default()
        },
    };
    loop {
        let mut progress = false;
        progress |= search.statements(&mut w);
        progress |= search.expressions(&mut w);
        progress |= search.buffers(&mut w);
        progress |= search.workgroup(&mut w);
        progress |= search.inputs(&mut w);
        if !progress || search.exhausted() {
            break;
        }
    }
    let mut stats = search.stats;
    stats.after = measure_work(&w);
    (w.to_case(), stats)
}

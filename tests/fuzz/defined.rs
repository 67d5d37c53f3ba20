//! Definite assignment over a PTX kernel: [`undefined_read`] finds a register read that some
//! path from the entry reaches without writing the register first.
//!
//! The kernel is split into basic blocks (labels, branches, `brx.idx` tables, `exit`), and
//! the registers written on every path into each block are computed to a fixed point (the
//! intersection over predecessors). A register is a declared name resolved through the
//! `{ }` scopes, since an inlined libm block declares registers that shadow the kernel's.
//! A guarded write counts as a write: the hazard is a read no write reaches at all.

use std::collections::HashMap;

/// The first read of a register that some path from the kernel's entry reaches without
/// any write of it. ptxas 12.9 and 13.0 at `-O2` and above (and the 580 driver's JIT) may
/// then give the read another value of the same expression: a step machine's `Let` of a
/// load, read in a later step, became that step's own load of the address, after a store
/// to it (`tests/fuzz_regressions/gpu-mismatch-step-machine-let-read-as-a-later-load.case`).
/// The emitter defines every register of a step machine before its first round.
pub fn undefined_read(ptx: &str) -> Option<String> {
    ptx.split(".entry")
        .skip(1)
        .find_map(|entry| Kernel::parse(entry).undefined_read())
}

#[derive(Default)]
struct Inst {
    text: String,
    reads: Vec<usize>,
    writes: Vec<usize>,
}

#[derive(Default)]
struct Block {
    insts: Vec<Inst>,
    /// Labels branched to from this block, each with the scopes the branch sees.
    targets: Vec<Target>,
    /// Whether control may fall into the next block.
    falls_through: bool,
}

/// A label as a branch names it, and the ids of the `{ }` scopes around the branch,
/// innermost last: a label is local to the scope it is put in (the cooperative entry's
/// segments each number theirs from 1).
#[derive(Clone)]
struct Target {
    label: String,
    scopes: Vec<usize>,
}

/// One kernel's blocks in text order (block 0 is the entry) and its registers.
#[derive(Default)]
struct Kernel {
    blocks: Vec<Block>,
    /// Each label's block, by the id of the scope it is put in and its name.
    labels: HashMap<(usize, String), usize>,
    tables: HashMap<String, Vec<Target>>,
    /// Ids of the open `{ }` scopes, innermost last.
    open: Vec<usize>,
    scope_count: usize,
    /// Each register's name as written, with its scope (`%r3@2`).
    names: Vec<String>,
}

/// A `{ }` scope's declarations: exact names and `%r<N>` ranges, each with its register ids.
#[derive(Default)]
struct Scope {
    exact: HashMap<String, usize>,
    ranges: HashMap<String, (u32, usize)>,
}

impl Kernel {
    fn undefined_read(&self) -> Option<String> {
        let entry_sets = self.defined_on_entry();
        for (block, defined) in self.blocks.iter().zip(entry_sets) {
            let Some(mut defined) = defined else {
                continue; // unreachable
            };
            for inst in &block.insts {
                if let Some(&r) = inst.reads.iter().find(|&&r| !defined.has(r)) {
                    return Some(format!("{} (reads {})", inst.text, self.names[r]));
                }
                inst.writes.iter().for_each(|&w| defined.set(w));
            }
        }
        None
    }

    /// One entry's text, from its parameter list to its closing brace.
    fn parse(ptx: &str) -> Kernel {
        let mut kernel = Kernel::default();
        let mut scopes: Vec<Scope> = Vec::new();
        let mut block = Block::default();
        let mut in_body = false;
        for line in ptx.lines().map(str::trim) {
            match line {
                "{" => {
                    in_body = true;
                    scopes.push(Scope::default());
                    kernel.scope_count += 1;
                    kernel.open.push(kernel.scope_count);
                    continue;
                }
                "}" => {
                    scopes.pop();
                    kernel.open.pop();
                    if scopes.is_empty() {
                        break;
                    }
                    continue;
                }
                _ if !in_body || line.is_empty() || line.starts_with("//") => continue,
                _ => {}
            }
            if let Some(decl) = line.strip_prefix(".reg ") {
                kernel.declare(scopes.last_mut(), decl);
                continue;
            }
            if let Some((label, rest)) = line.split_once(':').filter(|(l, _)| is_label(l)) {
                if let Some(list) = rest.trim().strip_prefix(".branchtargets") {
                    let targets = list.trim_end_matches(';').split(',');
                    let targets = targets.map(|t| kernel.target(t)).collect();
                    kernel.tables.insert(label.to_string(), targets);
                    continue;
                }
                let fell = std::mem::take(&mut block);
                kernel.push_block(fell, true);
                let scope = kernel.open.last().copied().unwrap_or(0);
                kernel
                    .labels
                    .insert((scope, label.to_string()), kernel.blocks.len());
                continue;
            }
            if line.starts_with('.') {
                continue; // .local, .shared and other declarations
            }
            if let Some(falls_through) = kernel.add_inst(&mut block, &scopes, line) {
                let ended = std::mem::take(&mut block);
                kernel.push_block(ended, falls_through);
            }
        }
        kernel.push_block(block, true);
        kernel
    }

    /// Close `block`: at a label or the text's end it falls through, at a jump or `exit`
    /// only when that is guarded.
    fn push_block(&mut self, mut block: Block, falls_through: bool) {
        block.falls_through = falls_through;
        self.blocks.push(block);
    }

    fn declare(&mut self, scope: Option<&mut Scope>, decl: &str) {
        let Some(scope) = scope else { return };
        let Some(name) = decl.trim_end_matches(';').split_whitespace().last() else {
            return;
        };
        let id = self.names.len();
        match name.split_once('<') {
            Some((prefix, count)) => {
                let count: u32 = count.trim_end_matches('>').parse().unwrap_or(0);
                scope.ranges.insert(prefix.to_string(), (count, id));
                self.names
                    .extend((0..count).map(|i| format!("{prefix}{i}@{id}")));
            }
            None => {
                scope.exact.insert(name.to_string(), id);
                self.names.push(format!("{name}@{id}"));
            }
        }
    }

    /// The register `token` names in `scopes` (innermost first), if it is a declared one.
    fn resolve(scopes: &[Scope], token: &str) -> Option<usize> {
        scopes.iter().rev().find_map(|scope| {
            if let Some(&id) = scope.exact.get(token) {
                return Some(id);
            }
            let digits = token.trim_start_matches(|c: char| !c.is_ascii_digit());
            let prefix = &token[..token.len() - digits.len()];
            let index: u32 = digits.parse().ok()?;
            let &(count, first) = scope.ranges.get(prefix)?;
            (index < count).then_some(first + index as usize)
        })
    }

    /// Add one instruction line to `block`. A jump or `exit` ends the block: then whether
    /// control may also fall through (the jump is guarded).
    fn add_inst(&mut self, block: &mut Block, scopes: &[Scope], line: &str) -> Option<bool> {
        let mut inst = Inst {
            text: line.to_string(),
            ..Inst::default()
        };
        let (guard, rest) = match line.strip_prefix('@') {
            Some(guarded) => guarded
                .split_once(char::is_whitespace)
                .unwrap_or((guarded, "")),
            None => ("", line),
        };
        let regs = |text: &str| -> Vec<usize> {
            registers(text)
                .filter_map(|t| Self::resolve(scopes, t))
                .collect()
        };
        inst.reads.extend(regs(guard));
        let (op, operands) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let operands = operands.trim().trim_end_matches(';');
        let (dest, sources) = split_destination(op, operands);
        inst.writes = regs(dest);
        inst.reads.extend(regs(sources));
        block.insts.push(inst);
        if op.starts_with("brx.idx") {
            let table = operands.rsplit(',').next().unwrap_or("").trim();
            block
                .targets
                .extend(self.tables.get(table).cloned().unwrap_or_default());
        } else if op.starts_with("bra") {
            block.targets.push(self.target(operands));
        } else if !matches!(op, "exit" | "ret" | "trap") {
            return None;
        }
        Some(!guard.is_empty())
    }

    fn target(&self, label: &str) -> Target {
        Target {
            label: label.trim().to_string(),
            scopes: self.open.clone(),
        }
    }

    /// The block `target` jumps to: its label in the innermost scope around the branch
    /// that has it.
    fn block_of(&self, target: &Target) -> Option<usize> {
        let key = |&scope: &usize| (scope, target.label.clone());
        target
            .scopes
            .iter()
            .rev()
            .find_map(|s| self.labels.get(&key(s)).copied())
    }

    /// For each block, the registers written on every path from the entry into it (`None`:
    /// no path reaches it).
    fn defined_on_entry(&self) -> Vec<Option<Bits>> {
        let n = self.blocks.len();
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (b, block) in self.blocks.iter().enumerate() {
            if block.falls_through && b + 1 < n {
                preds[b + 1].push(b);
            }
            for to in block.targets.iter().filter_map(|t| self.block_of(t)) {
                preds[to].push(b);
            }
        }
        let regs = self.names.len();
        let written: Vec<Bits> = self
            .blocks
            .iter()
            .map(|block| {
                let mut bits = Bits::new(regs);
                block
                    .insts
                    .iter()
                    .flat_map(|i| &i.writes)
                    .for_each(|&w| bits.set(w));
                bits
            })
            .collect();
        let mut entry: Vec<Option<Bits>> = vec![None; n];
        entry[0] = Some(Bits::new(regs));
        let mut changed = true;
        while changed {
            changed = false;
            for b in 1..n {
                let mut meet: Option<Bits> = None;
                for &p in &preds[b] {
                    let Some(out) = entry[p].as_ref().map(|e| e.or(&written[p])) else {
                        continue;
                    };
                    meet = Some(match meet {
                        None => out,
                        Some(m) => m.and(&out),
                    });
                }
                if meet.is_some() && meet != entry[b] {
                    entry[b] = meet;
                    changed = true;
                }
            }
        }
        entry
    }
}

/// A label's name: `$L__3`, `$Lv1_2`, `vyre_grid_done` (an instruction has a space first).
fn is_label(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c == '$' || c == '_' || c.is_ascii_alphanumeric())
}

/// The destination operand(s) of `op` and the rest. Stores, reductions and asynchronous
/// copies write memory (their first operand is an address); barriers (but a reducing
/// one) and jumps write nothing. A vector destination `{a, b}` spans several comma-separated operands.
fn split_destination<'a>(op: &str, operands: &'a str) -> (&'a str, &'a str) {
    const NO_DEST: [&str; 9] = [
        "bar",
        "barrier",
        "bra",
        "brx",
        "exit",
        "ret",
        "membar",
        "fence",
        "nanosleep",
    ];
    let head = op.split('.').next().unwrap_or(op);
    let reduces = op.starts_with("barrier.red") || op.starts_with("bar.red");
    if (NO_DEST.contains(&head) && !reduces) || operands.starts_with('[') || operands.is_empty() {
        return ("", operands);
    }
    let end = match operands.starts_with('{') {
        true => operands.find('}').map_or(operands.len(), |i| i + 1),
        false => operands.find(',').unwrap_or(operands.len()),
    };
    (&operands[..end], &operands[end..])
}

/// The `%name` tokens of `text` (special registers such as `%tid.x` resolve to nothing).
fn registers(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices('%').map(move |(at, _)| {
        let rest = &text[at + 1..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        &text[at..at + 1 + len]
    })
}

/// A set of register ids.
#[derive(Clone, PartialEq)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn has(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    fn or(&self, other: &Bits) -> Bits {
        Bits(self.0.iter().zip(&other.0).map(|(a, b)| a | b).collect())
    }
    fn and(mut self, other: &Bits) -> Bits {
        self.0.iter_mut().zip(&other.0).for_each(|(a, b)| *a &= b);
        self
    }
}

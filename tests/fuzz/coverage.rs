//! Which constructs a set of programs exercised (for the generator's coverage report).

use std::collections::BTreeMap;
use vyre_foundation::ir::{BufferAccess, Expr, Node, Program};

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

//! Subgroup operands over variables that lanes hold with different types.
//!
//! The reference evaluates a subgroup operand on every lane's own variables, by name. Where
//! lanes of one subgroup bound a name to values of different types (in different branches
//! of a step machine; a returned lane's frozen variable against the running lanes' one),
//! each lane's operand is the expression under its own bindings' types: `Let x = a` in one
//! branch and `Let x = f32(a)` in the other make `ballot(x)` test a u32 in some lanes and
//! an f32 in others. Such a variable keeps registers and a bound flag per type
//! (`steps`, `returned`); the operand is lowered once per combination of its variables'
//! types, each lane taking its own combination's value, and the faults raised under a
//! combination count only in its lanes. A combination whose expression the reference
//! cannot evaluate (an operator the other type does not take) fails the dispatch where a
//! lane holds it; a shuffle or reduction over lanes the reference does not combine (a u32
//! and a float) fails it as the reference's "mixed value types" does.
//!
//! Which types a variable gets is known only once its segment is lowered (a `Let` may
//! follow the operation in the text: a later branch, a later iteration). An entry that
//! binds such a variable with several is lowered again knowing them ([`lower_segment`]).
//!
//! A shuffle hands a lane's value over whole: where some lanes hold the operand as an
//! f64 and this lane as an f32, this lane receives an f64-held value (the reference's one
//! `Value::Float`). A variable declared with an f32 or a half that is assigned such a
//! value holds f64-held values from its `Let` on ([`Learned::wide_floats`]), which is
//! likewise known only once the entry is lowered.

use super::bytes::{ByteView, ViewLaneUse};
use super::{Local, LoweredBody, Lowerer, Segment, Val};
use crate::codegen::analysis::lockstep::vars_in;
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::{Typing, ValKind};
use crate::codegen::writer::{emit, Reg, RegClass};
use crate::codegen::CodegenError;
use smallvec::SmallVec;
use std::collections::{BTreeMap, BTreeSet};
use vyre_foundation::ir::Expr;

/// The typings of each variable, in the order the lowering met them.
pub(crate) type Typings = BTreeMap<String, SmallVec<[Typing; 2]>>;

/// What lowering an entry finds out about its variables' types, for the next lowering.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Learned {
    /// The types each variable some subgroup operand reads is bound to, in a step machine
    /// or a segment whose returned lanes stay.
    typings: Typings,
    /// Variables declared with an f32 or a half and assigned an f64-held value (a
    /// shuffle's, from lanes holding the operand as an f64): they hold f64-held values
    /// throughout (a half's out-of-bounds bytes as a flag beside, `half::half_as_wide`).
    wide_floats: BTreeSet<String>,
}

/// Lowerings of one entry after which its variables' types must have settled. One that
/// does not settle them widens another variable (which only grows the set) or, the set
/// unchanged, finds the typings once; a chain of 15 widenings (each shuffle handing the
/// next an f64 it only holds once the one before is widened) fits.
const LOWERINGS: usize = 32;

/// A variable of an operand and the typings lanes may hold it with.
type TypedVar<'p> = (&'p str, SmallVec<[Typing; 2]>);

/// Lower `segment` with lowerers from `make`: again, knowing what it learned, while a
/// lowering finds variables bound with several typings or widened that it did not know
/// (see the module's header).
pub(crate) fn lower_segment<'p>(
    make: impl Fn() -> Lowerer<'p>,
    segment: &Segment<'p>,
) -> Result<LoweredBody, CodegenError> {
    let mut known = Learned::default();
    for _ in 0..LOWERINGS {
        let mut lowerer = make();
        lowerer.known = known;
        let body = lowerer.lower_entry(segment)?;
        match body.to_learn {
            None => return Ok(body),
            Some(learned) => known = learned,
        }
    }
    Err(CodegenError::invalid(
        format!("an entry's variable types did not settle in {LOWERINGS} lowerings"),
        "report this vyre-cuda bug",
    ))
}

/// Every combination of one typing per variable, the first variable's changing slowest.
fn combinations(vars: &[TypedVar<'_>]) -> Vec<SmallVec<[Typing; 4]>> {
    vars.iter()
        .fold(vec![SmallVec::new()], |partial, (_, typings)| {
            (partial.iter())
                .flat_map(|prefix| {
                    typings.iter().map(move |typing| {
                        let mut next = prefix.clone();
                        next.push(*typing);
                        next
                    })
                })
                .collect()
        })
}

/// A combination's lanes and what its lowering gave.
struct Lanes {
    holding: Reg,
    value: Val,
}

/// Why a combination gave no value.
enum Unlowered {
    /// The operand does not lower with the typings here: the program's own error.
    Here(CodegenError),
    /// Nor with another combination's, whose lanes (set in the register) then fail.
    Elsewhere(Reg),
    /// The combination's registers could not be found: an emitter bug.
    Bug(CodegenError),
}

impl<'p> Lowerer<'p> {
    /// Note that `name` is bound to `typing` here (a variable some subgroup operand reads,
    /// where lanes may evaluate each other's operands: a step machine, returned lanes).
    pub(super) fn note_typing(&mut self, name: &str, typing: Typing) {
        let lanes_apart = self.steps.is_some() || self.returned.is_some();
        if !lanes_apart || !self.facts.subgroup_operand_vars.contains(name) {
            return;
        }
        let known = self.learned.typings.entry(name.to_string()).or_default();
        if !known.contains(&typing) {
            known.push(typing);
        }
    }

    /// What this lowering found that it did not know in advance: typings when some
    /// variable has several, widened variables.
    pub(super) fn take_learned(&mut self) -> Option<Learned> {
        let learned = &self.learned;
        let several = learned.typings.values().any(|typings| typings.len() > 1);
        let new_typings = several && learned.typings != self.known.typings;
        let new_wide = !learned.wide_floats.is_subset(&self.known.wide_floats);
        if !new_typings && !new_wide {
            return None;
        }
        let mut learned = std::mem::take(&mut self.learned);
        if new_wide {
            // Typings found while some variables were still held narrow (what a widened
            // one gave, `let y = x`) do not hold once they are widened: found again.
            learned.typings.clear();
        }
        learned
            .wide_floats
            .extend(self.known.wide_floats.iter().cloned());
        Some(learned)
    }

    /// Whether variable `name` holds f64-held values (see [`Learned::wide_floats`]).
    pub(super) fn is_wide_float(&self, name: &str) -> bool {
        self.known.wide_floats.contains(name)
    }

    /// `value`, assigned to `local` (`name`), as the variable holds it: an f32 or a half
    /// widens into an f64-held variable (`half::half_as_wide`); an f64-held value
    /// assigned to an f32 or half variable makes it one from its `Let` on, in the next
    /// lowering (this one's code is dropped).
    pub(super) fn assigned_float(
        &mut self,
        name: &str,
        local: Val,
        value: Val,
    ) -> Result<Val, CodegenError> {
        Ok(match (local.kind, value.kind) {
            (ValKind::F64, ValKind::F32) => self.widened_float(value),
            // (An f32 in a program with half buffers is held as a `Half` too.)
            (ValKind::F32 | ValKind::Half, ValKind::F64) => {
                if self.is_wide_float(name) {
                    return Err(CodegenError::invalid(
                        format!(
                            "variable `{name}` is f64-held yet bound as a {}",
                            local.kind.name()
                        ),
                        "report this vyre-cuda bug",
                    ));
                }
                self.learned.wide_floats.insert(name.to_string());
                Val::new(local.kind, self.w.reg(RegClass::F32))
            }
            (ValKind::F64, ValKind::Half) => self.half_as_wide(value),
            _ => value,
        })
    }

    /// The variables of `operand` that lanes may hold with several typings.
    pub(super) fn several_typed_vars(&self, operand: &'p Expr) -> Vec<TypedVar<'p>> {
        if self.steps.is_none() && self.returned.is_none() {
            return Vec::new();
        }
        (vars_in(operand).into_iter())
            .filter_map(|name| {
                let known = self.known.typings.get(name);
                let typings = known.or_else(|| self.learned.typings.get(name))?;
                (typings.len() > 1).then(|| (name, typings.clone()))
            })
            .collect()
    }

    /// The typing of variable `name` here.
    fn typing_here(&self, name: &str) -> Option<Typing> {
        if self.byte_views.contains_key(name) {
            return Some(Typing::View);
        }
        self.locals
            .get(name)
            .map(|local| Typing::Value(local.val.kind))
    }

    /// A subgroup operand whose variables `vars` lanes may hold with several typings (see
    /// the module's header): this lane's value as `wanted` takes it.
    pub(super) fn put_typed_lanes(
        &mut self,
        operand: &'p Expr,
        wanted: ViewLaneUse,
        vars: Vec<TypedVar<'p>>,
    ) -> Result<Val, CodegenError> {
        let here: Vec<Option<Typing>> = vars
            .iter()
            .map(|(name, _)| self.typing_here(name))
            .collect();
        let saved: Vec<(Option<Local>, Option<ByteView>)> = (vars.iter())
            .map(|(name, _)| {
                (
                    self.locals.get(name).copied(),
                    self.byte_views.get(name).copied(),
                )
            })
            .collect();
        let shared = std::mem::take(&mut self.shared_values);
        let mut lanes = Vec::new();
        let mut value_here = None;
        let mut outcome = Ok(());
        for combination in combinations(&vars) {
            let is_here = combination.iter().zip(&here).all(|(t, h)| Some(*t) == *h);
            let lowered =
                self.put_operand_typed(operand, wanted, &vars, (&combination, &here), is_here);
            self.restore_bindings(&vars, &saved);
            match lowered {
                Ok(lane) => {
                    value_here = value_here.or(is_here.then_some(lane.value));
                    lanes.push(lane);
                }
                Err(Unlowered::Here(error) | Unlowered::Bug(error)) => {
                    outcome = Err(error);
                    break;
                }
                // The reference fails evaluating such a lane's operand.
                Err(Unlowered::Elsewhere(holding)) => {
                    self.fault_if(holding, DeviceFault::RejectedByReference)
                }
            }
        }
        self.shared_values = shared;
        outcome?;
        let Some(value_here) = value_here else {
            return Err(CodegenError::invalid(
                "a subgroup operand's variables have no typing here",
                "report this vyre-cuda bug",
            ));
        };
        self.merge_typed_lanes(wanted, value_here, lanes)
    }

    /// The operand lowered with its variables bound to `combination`'s registers, as
    /// `wanted` takes it; the faults it raises count in the combination's lanes. When the
    /// operand does not lower under a combination other than the one here, the text it
    /// wrote is dropped and the combination's lanes are returned (the reference fails
    /// there); the lanes and the bindings themselves never fail but by a bug.
    fn put_operand_typed(
        &mut self,
        operand: &'p Expr,
        wanted: ViewLaneUse,
        vars: &[TypedVar<'p>],
        (combination, here): (&[Typing], &[Option<Typing>]),
        is_here: bool,
    ) -> Result<Lanes, Unlowered> {
        let holding = (self.lanes_holding(vars, combination, here)).map_err(Unlowered::Bug)?;
        let (text, unanchored) = (self.w.text_mark(), self.unanchored.len());
        let raised_from = self.operand_faults.last().map_or(0, Vec::len);
        self.shared_values.clear();
        (vars.iter().zip(combination).zip(here))
            .try_for_each(|(((name, _), typing), here)| self.bind_typing(name, *typing, *here))
            .map_err(Unlowered::Bug)?;
        // (an operand nested in one lowered under other lanes' types is under them too)
        let outer = self.typing_elsewhere;
        self.typing_elsewhere = outer || !is_here;
        let value = self
            .put_one_typing_operand(operand, wanted)
            .and_then(|value| self.lane_value_as(wanted, value));
        self.typing_elsewhere = outer;
        let raised = match self.operand_faults.last_mut() {
            Some(raised) => raised.split_off(raised_from.min(raised.len())),
            None => Vec::new(),
        };
        let value = match value {
            Ok(value) => value,
            Err(error) if is_here => return Err(Unlowered::Here(error)),
            Err(_) => {
                self.w.truncate(text);
                self.unanchored.truncate(unanchored);
                return Err(Unlowered::Elsewhere(holding));
            }
        };
        for (p, fault) in raised {
            let mine = self.pred();
            emit!(self.w, "and.pred {mine}, {p}, {holding}");
            self.fault_if(mine, fault);
        }
        Ok(Lanes { holding, value })
    }

    /// Set in the lanes holding every variable of `vars` with its typing in `combination`.
    fn lanes_holding(
        &mut self,
        vars: &[TypedVar<'p>],
        combination: &[Typing],
        here: &[Option<Typing>],
    ) -> Result<Reg, CodegenError> {
        let holding = self.true_pred();
        for (((name, _), typing), here) in vars.iter().zip(combination).zip(here) {
            let flag = self.holds_typing(name, *typing, *here)?;
            emit!(self.w, "and.pred {holding}, {holding}, {flag}");
        }
        Ok(holding)
    }

    /// Set where this lane holds variable `name` with `typing` (`here`: its typing at the
    /// operation, which every running lane of a segment keeping returned lanes has).
    fn holds_typing(
        &mut self,
        name: &'p str,
        typing: Typing,
        here: Option<Typing>,
    ) -> Result<Reg, CodegenError> {
        if self.steps.is_some() {
            // Registers of every typing exist once an operand asks for them.
            let _registers = self.typing_binding(name, typing)?;
            return Ok(match self.step_typing_flag(name, typing) {
                Some(flag) => flag,
                None => self.false_pred(),
            });
        }
        let frozen = self.frozen_flag(name, typing)?;
        let (Some(returned), true) = (self.returned_pred(), Some(typing) == here) else {
            return Ok(frozen);
        };
        let holding = self.pred();
        emit!(self.w, "not.pred {holding}, {returned}");
        emit!(self.w, "or.pred {holding}, {holding}, {frozen}");
        Ok(holding)
    }

    /// The registers variable `name` lives in when bound to `typing`: a step machine's, or
    /// a returned lane's frozen ones.
    fn typing_binding(
        &mut self,
        name: &'p str,
        typing: Typing,
    ) -> Result<Result<Val, ByteView>, CodegenError> {
        if self.steps.is_none() {
            return self.frozen_binding(name, typing);
        }
        let missing = || {
            CodegenError::invalid(
                "a step machine's variable without registers",
                "report this vyre-cuda bug",
            )
        };
        match typing {
            Typing::Value(kind) => {
                let placeholder = Val::new(kind, self.w.reg(kind.reg_class()));
                let reg = self.step_register(name, placeholder)?.ok_or_else(missing)?;
                Ok(Ok(Val::new(kind, reg)))
            }
            Typing::View => Ok(Err(self.step_view(name)?.ok_or_else(missing)?)),
        }
    }

    /// Bind `name` to its registers of `typing` for an operand's lowering (those of its
    /// typing here are bound already).
    fn bind_typing(
        &mut self,
        name: &'p str,
        typing: Typing,
        here: Option<Typing>,
    ) -> Result<(), CodegenError> {
        if Some(typing) == here {
            return Ok(());
        }
        let loop_var = self.locals.get(name).is_some_and(|local| local.loop_var);
        match self.typing_binding(name, typing)? {
            Ok(val) => {
                self.byte_views.remove(name);
                self.locals.insert(name, Local { val, loop_var });
            }
            Err(view) => {
                self.locals.remove(name);
                self.byte_views.insert(name, view);
            }
        }
        Ok(())
    }

    fn restore_bindings(
        &mut self,
        vars: &[TypedVar<'p>],
        saved: &[(Option<Local>, Option<ByteView>)],
    ) {
        for ((name, _), (local, view)) in vars.iter().zip(saved) {
            match local {
                Some(local) => self.locals.insert(name, *local),
                None => self.locals.remove(name),
            };
            match view {
                Some(view) => self.byte_views.insert(name, *view),
                None => self.byte_views.remove(name),
            };
        }
    }

    /// A combination's operand value as the operation combines lanes: a shuffle's lane
    /// as a u32, a shuffled or reduced half as the f32 it is (in its own lanes, whose
    /// faults these are).
    fn lane_value_as(&mut self, wanted: ViewLaneUse, value: Val) -> Result<Val, CodegenError> {
        Ok(match wanted {
            ViewLaneUse::Condition => value,
            ViewLaneUse::Lane => {
                let lane = self.u32_checked(value, DeviceFault::SubgroupLaneNotU32)?;
                Val::new(ValKind::U32, lane)
            }
            ViewLaneUse::Shuffled | ViewLaneUse::Reduced => self.half_lane(value),
        })
    }

    /// Each lane's value from its own combination's.
    fn merge_typed_lanes(
        &mut self,
        wanted: ViewLaneUse,
        here: Val,
        lanes: Vec<Lanes>,
    ) -> Result<Val, CodegenError> {
        if let ViewLaneUse::Condition = wanted {
            let any = self.false_pred();
            for lane in lanes {
                let truthy = self.truthy(lane.value);
                emit!(self.w, "and.pred {truthy}, {truthy}, {}", lane.holding);
                emit!(self.w, "or.pred {any}, {any}, {truthy}");
            }
            let flag = self.b32();
            emit!(self.w, "selp.u32 {flag}, 1, 0, {any}");
            return Ok(Val::new(ValKind::Bool, flag));
        }
        let Some(kind) = combined_kind(here.kind, &lanes) else {
            // The reference combines no lanes of this kind: the operation fails anyway.
            return Ok(here);
        };
        let merged = self.discarded_zero(kind);
        let ty = merged.reg.class().ty();
        for lane in lanes {
            let holding = lane.holding;
            match lane.value.kind {
                same if same == kind => {
                    emit!(
                        self.w,
                        "@{holding} mov.{ty} {}, {}",
                        merged.reg,
                        lane.value.reg
                    )
                }
                ValKind::F32 if kind == ValKind::F64 => {
                    let wide = self.widened_float(lane.value);
                    emit!(self.w, "@{holding} mov.f64 {}, {}", merged.reg, wide.reg)
                }
                _ => self.fault_if(holding, DeviceFault::SubgroupLanesNotCombinable),
            }
        }
        Ok(merged)
    }
}

/// The kind a shuffle or reduction combines its lanes as, given the lanes' kinds and the
/// kind here (`None`: the reference combines no such lanes). Float lanes combine as the
/// reference's one `Value::Float`: as f64 where some lane is one (f32s widen exactly; a
/// reduction rounds every lane to f32 anyway, and a shuffle hands an f64 lane's value over
/// whole, so that an f32 lane here then holds an f64-held value: see `Lowerer::wide_floats`).
fn combined_kind(here: ValKind, lanes: &[Lanes]) -> Option<ValKind> {
    let any_f64 = lanes.iter().any(|lane| lane.value.kind == ValKind::F64);
    match here {
        ValKind::U32 => Some(ValKind::U32),
        ValKind::F32 if !any_f64 => Some(ValKind::F32),
        ValKind::F32 | ValKind::F64 => Some(ValKind::F64),
        _ => None,
    }
}

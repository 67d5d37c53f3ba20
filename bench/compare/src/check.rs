//! Output checks against vyre-reference: what an engine's output is compared with.

use crate::measure::R;
use crate::programs;
use vyre_foundation::ir::Program;

/// What a check compares an engine's output with.
pub enum Expect {
    /// The reference's outputs for the whole workload.
    Full(Vec<Vec<u8>>),
    /// The reference's outputs for elements `idx` of the single output, computed by running
    /// the same program shape on the gathered inputs (elementwise programs only).
    Sampled {
        idx: Vec<usize>,
        want: Vec<u8>,
        out_bytes: usize,
    },
}

impl Expect {
    pub fn check(&self, got: &[Vec<u8>]) -> R<()> {
        match self {
            Expect::Full(want) => {
                if got.len() != want.len() {
                    return Err(format!(
                        "{} outputs, the reference has {}",
                        got.len(),
                        want.len()
                    ));
                }
                for (k, (g, w)) in got.iter().zip(want).enumerate() {
                    compare(k, g, w)?;
                }
                Ok(())
            }
            Expect::Sampled { .. } => {
                if got.len() != 1 {
                    return Err(format!("{} outputs, the reference has 1", got.len()));
                }
                self.check_one(&got[0])
            }
        }
    }

    pub fn check_one(&self, got: &[u8]) -> R<()> {
        match self {
            Expect::Full(want) => {
                if want.len() != 1 {
                    return Err(format!("1 output, the reference has {}", want.len()));
                }
                compare(0, got, &want[0])
            }
            Expect::Sampled {
                idx,
                want,
                out_bytes,
            } => {
                if got.len() != *out_bytes {
                    return Err(format!(
                        "output has {} bytes, expected {out_bytes}",
                        got.len()
                    ));
                }
                compare(0, &programs::gather(got, idx), want)
                    .map_err(|e| format!("{e} (sampled check: element index list position)"))
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Expect::Full(_) => "checked in full against vyre-reference".into(),
            Expect::Sampled { idx, .. } => format!(
                "checked against vyre-reference on {} sampled elements (first and last 2^15 and random ones; \
                 reference run on the same program over the gathered inputs)",
                idx.len()
            ),
        }
    }
}

/// `got` byte for byte `want` (output `output` of a run): the count of differing words
/// and the first one, or `Ok`.
pub fn compare(output: usize, got: &[u8], want: &[u8]) -> R<()> {
    if got.len() != want.len() {
        return Err(format!(
            "output {output}: {} bytes, the reference has {}",
            got.len(),
            want.len()
        ));
    }
    if let Some(pos) = got.iter().zip(want).position(|(g, w)| g != w) {
        let word = pos / 4;
        let read = |b: &[u8]| {
            let s = word * 4;
            b.get(s..s + 4)
                .map(|w| format!("{:#010x}", u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
                .unwrap_or_default()
        };
        let differing = got
            .chunks(4)
            .zip(want.chunks(4))
            .filter(|(g, w)| g != w)
            .count();
        return Err(format!(
            "output {output}: {differing} words differ from vyre-reference, first at word {word}: got {} want {}",
            read(got),
            read(want)
        ));
    }
    Ok(())
}

pub fn expect_elementwise(make: &dyn Fn(u32) -> Program, n: usize, inputs: &[&[u8]]) -> R<Expect> {
    if n <= 1 << 16 {
        return Ok(Expect::Full(programs::reference(&make(n as u32), inputs)?));
    }
    let idx = programs::sample_indices(n, 1 << 15, 1 << 15, n as u64);
    // Inputs of `n` words are gathered; others (a scale in a one-element buffer) go whole.
    let gathered: Vec<Vec<u8>> = (inputs.iter())
        .map(|b| match b.len() == n * 4 {
            true => programs::gather(b, &idx),
            false => b.to_vec(),
        })
        .collect();
    let borrowed: Vec<&[u8]> = gathered.iter().map(Vec::as_slice).collect();
    let mut want = programs::reference(&make(idx.len() as u32), &borrowed)?;
    if want.len() != 1 {
        return Err(format!("reference returned {} outputs", want.len()));
    }
    Ok(Expect::Sampled {
        idx,
        want: want.remove(0),
        out_bytes: n * 4,
    })
}

//! vyre-cuda's target payload bytes ([`crate::PAYLOAD_FORMAT`], version [`FORMAT_VERSION`]):
//! the PTX target, each value's storage slot, and each node's kernel entries with the
//! slot of each kernel binding. Little-endian, length-prefixed; vyre authenticates the
//! whole payload by digest, this format checks its own shape.

use crate::codegen::{AbiFlags, KernelEntries, PtxIsa, PtxTarget};

/// Version of this byte format (the payload format's version). 2: each kernel records
/// whether it is timed (`AbiFlags::timed`). 3: the entries carry the libm routines inlined
/// (emitter v18), so the module header rebuilt from a payload defines no `.func`s; a
/// version 2 entry calling one would not load.
pub(crate) const FORMAT_VERSION: u16 = 3;
const MAGIC: &[u8; 8] = b"VYRECUDA";

/// A binding's chunking as one word: 0 cut into the chunks, 1 accumulated, 2 broadcast
/// (`KernelBinding::whole`). Payloads written before broadcast bindings existed read the
/// same.
fn whole_code(accumulated: bool, broadcast: bool) -> u32 {
    u32::from(accumulated) | u32::from(broadcast) << 1
}

/// One node's kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeKernel {
    /// `ArtifactNodeId` of the node.
    pub(crate) node: u32,
    /// Storage slot of each kernel binding, in binding (resident handle) order.
    pub(crate) slots: Vec<u32>,
    pub(crate) entries: KernelEntries,
}

/// A decoded payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Payload {
    pub(crate) target: PtxTarget,
    /// Storage slot of each artifact value, indexed by `ArtifactValueId`.
    pub(crate) value_slots: Vec<u32>,
    /// The nodes in the order they run.
    pub(crate) nodes: Vec<NodeKernel>,
}

impl Payload {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Writer(Vec::with_capacity(1 << 12));
        out.0.extend_from_slice(MAGIC);
        out.u32(u32::from(FORMAT_VERSION));
        out.u32(self.target.sm());
        out.u32(self.target.isa().major);
        out.u32(self.target.isa().minor);
        out.u32s(&self.value_slots);
        out.u32(self.nodes.len() as u32);
        for node in &self.nodes {
            out.u32(node.node);
            out.u32s(&node.slots);
            let entries = &node.entries;
            out.str(&entries.entry);
            out.u32(entries.flags.segments);
            out.u32(u32::from(entries.flags.fault_word));
            out.u32(u32::from(entries.flags.cooperative));
            out.u32(entries.flags.vector_lanes);
            out.u32(u32::from(entries.flags.timed));
            let flags = entries
                .flags
                .accumulated
                .iter()
                .zip(&entries.flags.broadcast);
            let whole: Vec<u32> = flags.map(|(&a, &b)| whole_code(a, b)).collect();
            out.u32s(&whole);
            out.str(&entries.text);
            let libm = entries.libm_symbols();
            out.u32(libm.len() as u32);
            libm.iter().for_each(|symbol| out.str(symbol));
            match &entries.vector_ptx {
                Some(ptx) => {
                    out.u32(1);
                    out.str(ptx);
                }
                None => out.u32(0),
            }
        }
        out.0
    }

    /// Decodes `bytes`; the error says what is malformed.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut input = Reader { bytes, at: 0 };
        if input.take(MAGIC.len())? != MAGIC {
            return Err("the bytes are not a vyre-cuda payload (bad magic)".into());
        }
        let version = input.u32()?;
        if version != u32::from(FORMAT_VERSION) {
            return Err(format!(
                "payload byte format {version} is not this vyre-cuda's ({FORMAT_VERSION})"
            ));
        }
        let (sm, major, minor) = (input.u32()?, input.u32()?, input.u32()?);
        let target = PtxTarget::new(sm, PtxIsa::new(major, minor)).map_err(|e| e.to_string())?;
        let value_slots = input.u32s()?;
        let count = input.u32()?;
        let mut nodes = Vec::new();
        for _ in 0..count {
            nodes.push(input.node()?);
        }
        if input.at != bytes.len() {
            return Err(format!("{} trailing byte(s)", bytes.len() - input.at));
        }
        Ok(Self {
            target,
            value_slots,
            nodes,
        })
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    fn u32s(&mut self, values: &[u32]) {
        self.u32(values.len() as u32);
        values.iter().for_each(|&v| self.u32(v));
    }

    fn str(&mut self, text: &str) {
        self.u32(text.len() as u32);
        self.0.extend_from_slice(text.as_bytes());
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len());
        let end = end.ok_or_else(|| format!("truncated at byte {}", self.at))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn u32s(&mut self) -> Result<Vec<u32>, String> {
        let count = self.u32()? as usize;
        if count > self.bytes.len() / 4 {
            return Err(format!(
                "a list of {count} entries is longer than the payload"
            ));
        }
        (0..count).map(|_| self.u32()).collect()
    }

    fn string(&mut self) -> Result<String, String> {
        let len = self.u32()? as usize;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| "a text is not UTF-8".to_string())
    }

    fn flag(&mut self) -> Result<bool, String> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("a flag reads {other}")),
        }
    }

    fn node(&mut self) -> Result<NodeKernel, String> {
        let node = self.u32()?;
        let slots = self.u32s()?;
        let entry = self.string()?;
        let (segments, fault_word, cooperative, vector_lanes, timed) = (
            self.u32()?,
            self.flag()?,
            self.flag()?,
            self.u32()?,
            self.flag()?,
        );
        let whole = (self.u32s()?.into_iter())
            .map(|code| match code {
                0..=2 => Ok((code == 1, code == 2)),
                other => Err(format!("a binding's chunking reads {other}")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let flags = AbiFlags {
            segments,
            fault_word,
            cooperative,
            vector_lanes,
            timed,
            accumulated: whole.iter().map(|&(a, _)| a).collect(),
            broadcast: whole.iter().map(|&(_, b)| b).collect(),
        };
        let text = self.string()?;
        let libm = (0..self.u32()?)
            .map(|_| self.string())
            .collect::<Result<Vec<_>, _>>()?;
        let vector_ptx = if self.flag()? {
            Some(self.string()?)
        } else {
            None
        };
        let entries = KernelEntries::from_parts(entry, flags, text, &libm, vector_ptx)
            .map_err(|e| e.to_string())?;
        Ok(NodeKernel {
            node,
            slots,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(accumulated: Vec<bool>, broadcast: Vec<bool>) -> Payload {
        let flags = AbiFlags {
            segments: 1,
            fault_word: true,
            cooperative: false,
            vector_lanes: 4,
            timed: true,
            accumulated,
            broadcast,
        };
        let entries = KernelEntries::from_parts(
            "vyre_node0".into(),
            flags,
            ".visible .entry vyre_node0() { ret; }".into(),
            &[],
            Some("// vector".into()),
        )
        .unwrap();
        Payload {
            target: PtxTarget::sm90(),
            value_slots: vec![0, 1, 2],
            nodes: vec![NodeKernel {
                node: 0,
                slots: vec![0, 1, 2],
                entries,
            }],
        }
    }

    #[test]
    fn whole_bindings_round_trip_as_one_code_per_binding() {
        let original = payload(vec![false, true, false], vec![true, false, false]);
        let bytes = original.encode();
        assert_eq!(Payload::decode(&bytes), Ok(original.clone()));
        // The list as written (its length, then broadcast, accumulated, cut); an unknown
        // code is refused.
        let codes: Vec<u8> = [3u32, 2, 1, 0]
            .iter()
            .flat_map(|c| c.to_le_bytes())
            .collect();
        let at = (bytes.windows(codes.len()))
            .position(|w| w == codes.as_slice())
            .expect("the binding codes");
        let mut bad = bytes.clone();
        bad[at + 4] = 3;
        let error = Payload::decode(&bad).unwrap_err();
        assert!(error.contains("chunking reads 3"), "{error}");
    }

    #[test]
    fn the_timed_flag_round_trips_and_older_payloads_are_refused() {
        let timed = payload(vec![false; 3], vec![false; 3]);
        let mut untimed = timed.clone();
        untimed.nodes[0].entries.flags.timed = false;
        for original in [timed, untimed] {
            let decoded = Payload::decode(&original.encode()).unwrap();
            assert_eq!(
                decoded.nodes[0].entries.flags.timed,
                original.nodes[0].entries.flags.timed
            );
            assert_eq!(decoded, original);
        }
        // Version 1 (no timed flag) and version 2 (entries calling libm `.func`s) payloads
        // are not read as this format.
        for version in [1u32, 2] {
            let mut old = payload(vec![false; 3], vec![false; 3]).encode();
            old[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&version.to_le_bytes());
            let error = Payload::decode(&old).unwrap_err();
            assert!(
                error.contains(&format!("payload byte format {version}")),
                "{error}"
            );
        }
    }
}

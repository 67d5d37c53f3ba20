//! PTX targets: which `.target sm_NN` and `.version X.Y` a kernel is written for.

use super::CodegenError;
use std::fmt;

/// A PTX ISA version, written `.version major.minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PtxIsa {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl PtxIsa {
    /// Build a version.
    #[must_use]
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }
}

impl fmt::Display for PtxIsa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The newest PTX ISA this emitter has been checked against (CUDA 13.0's `ptxas`).
pub const NEWEST_CHECKED_ISA: PtxIsa = PtxIsa::new(9, 0);

/// Oldest architecture we emit for: `barrier.sync`, `atom.<sem>` and `shf` need sm_70.
pub const OLDEST_SM: u32 = 70;

/// Architectures the emitter knows, with the first PTX ISA that accepts each target.
const SM_MIN_ISA: &[(u32, PtxIsa)] = &[
    (70, PtxIsa::new(6, 0)),
    (72, PtxIsa::new(6, 1)),
    (75, PtxIsa::new(6, 3)),
    (80, PtxIsa::new(7, 0)),
    (86, PtxIsa::new(7, 1)),
    (87, PtxIsa::new(7, 4)),
    (89, PtxIsa::new(7, 8)),
    (90, PtxIsa::new(7, 8)),
    (100, PtxIsa::new(8, 6)),
    (101, PtxIsa::new(8, 6)),
    (103, PtxIsa::new(8, 8)),
    (120, PtxIsa::new(8, 7)),
    (121, PtxIsa::new(8, 8)),
];

/// The newest PTX ISA each CUDA driver version (`cuDriverGetVersion`) can load.
const DRIVER_MAX_ISA: &[(i32, PtxIsa)] = &[
    (11000, PtxIsa::new(7, 0)),
    (11010, PtxIsa::new(7, 1)),
    (11020, PtxIsa::new(7, 2)),
    (11030, PtxIsa::new(7, 3)),
    (11040, PtxIsa::new(7, 4)),
    (11050, PtxIsa::new(7, 5)),
    (11060, PtxIsa::new(7, 6)),
    (11070, PtxIsa::new(7, 7)),
    (11080, PtxIsa::new(7, 8)),
    (12000, PtxIsa::new(8, 0)),
    (12010, PtxIsa::new(8, 1)),
    (12020, PtxIsa::new(8, 2)),
    (12030, PtxIsa::new(8, 3)),
    (12040, PtxIsa::new(8, 4)),
    (12050, PtxIsa::new(8, 5)),
    (12080, PtxIsa::new(8, 7)),
    (12090, PtxIsa::new(8, 8)),
    (13000, PtxIsa::new(9, 0)),
];

/// What a kernel is compiled for: an SM architecture and a PTX ISA version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PtxTarget {
    sm: u32,
    isa: PtxIsa,
}

impl PtxTarget {
    /// A target for `sm_<sm>` written in PTX `isa`. Fails when the ISA is too old for the
    /// architecture, newer than this emitter was checked against, or the architecture is
    /// older than sm_70.
    pub fn new(sm: u32, isa: PtxIsa) -> Result<Self, CodegenError> {
        let Some(&(_, min_isa)) = SM_MIN_ISA.iter().find(|(known, _)| *known == sm) else {
            return Err(CodegenError::Target {
                detail: format!("sm_{sm} is not an architecture vyre-cuda emits for"),
                fix: format!(
                    "use sm_{OLDEST_SM} or newer (known: {})",
                    SM_MIN_ISA
                        .iter()
                        .map(|(sm, _)| format!("sm_{sm}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        };
        if isa < min_isa {
            return Err(CodegenError::Target {
                detail: format!("PTX ISA {isa} cannot target sm_{sm} (needs {min_isa})"),
                fix: format!("use PTX ISA {min_isa} or newer, or a CUDA driver that supports it"),
            });
        }
        if isa > NEWEST_CHECKED_ISA {
            return Err(CodegenError::Target {
                detail: format!("PTX ISA {isa} is newer than {NEWEST_CHECKED_ISA}, the newest vyre-cuda checks its kernels against"),
                fix: format!("use PTX ISA {NEWEST_CHECKED_ISA} or older"),
            });
        }
        Ok(Self { sm, isa })
    }

    /// The target for a device of compute capability `major.minor` driven by a CUDA
    /// driver reporting `driver_version` (e.g. `13000`): the device's own architecture
    /// (or the newest known one below it) and the newest PTX ISA both the driver and this
    /// emitter accept. Never a PTX version the driver cannot load.
    pub fn for_device(major: u32, minor: u32, driver_version: i32) -> Result<Self, CodegenError> {
        let device_sm = major * 10 + minor;
        let sm = SM_MIN_ISA
            .iter()
            .map(|(sm, _)| *sm)
            .filter(|sm| *sm <= device_sm)
            .max()
            .ok_or_else(|| CodegenError::Target {
                detail: format!("compute capability {major}.{minor} is older than sm_{OLDEST_SM}"),
                fix: "run on a GPU of compute capability 7.0 or newer".to_string(),
            })?;
        let driver_isa = DRIVER_MAX_ISA
            .iter()
            .filter(|(version, _)| *version <= driver_version)
            .map(|(_, isa)| *isa)
            .max()
            .ok_or_else(|| CodegenError::Target {
                detail: format!("CUDA driver version {driver_version} predates CUDA 11.0"),
                fix: "install an NVIDIA driver that supports CUDA 11.0 or newer".to_string(),
            })?;
        Self::new(sm, driver_isa.min(NEWEST_CHECKED_ISA))
    }

    /// `sm_80` at its oldest PTX ISA (7.0).
    #[must_use]
    pub fn sm80() -> Self {
        Self {
            sm: 80,
            isa: PtxIsa::new(7, 0),
        }
    }

    /// `sm_90` at its oldest PTX ISA (7.8).
    #[must_use]
    pub fn sm90() -> Self {
        Self {
            sm: 90,
            isa: PtxIsa::new(7, 8),
        }
    }

    /// The SM architecture number, e.g. `90`.
    #[must_use]
    pub const fn sm(&self) -> u32 {
        self.sm
    }

    /// The PTX ISA version.
    #[must_use]
    pub const fn isa(&self) -> PtxIsa {
        self.isa
    }
}

impl fmt::Display for PtxTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{} (PTX {})", self.sm, self.isa)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h100_on_cuda_13_gets_sm90_and_ptx_9_0() {
        let target = PtxTarget::for_device(9, 0, 13000).unwrap();
        assert_eq!((target.sm(), target.isa()), (90, PtxIsa::new(9, 0)));
    }

    #[test]
    fn never_emits_a_version_the_driver_cannot_load() {
        let target = PtxTarget::for_device(8, 0, 12040).unwrap();
        assert_eq!(target.isa(), PtxIsa::new(8, 4));
        let target = PtxTarget::for_device(8, 0, 12070).unwrap();
        assert_eq!(target.isa(), PtxIsa::new(8, 5));
        // A newer driver than we checked: capped at the newest checked ISA.
        let target = PtxTarget::for_device(9, 0, 13040).unwrap();
        assert_eq!(target.isa(), NEWEST_CHECKED_ISA);
    }

    #[test]
    fn driver_too_old_for_the_architecture_is_an_error() {
        let error = PtxTarget::for_device(9, 0, 11070).unwrap_err();
        assert!(error.fix().contains("driver"), "{}", error.fix());
    }

    #[test]
    fn unknown_newer_architecture_falls_back_to_newest_known_below() {
        let target = PtxTarget::for_device(9, 5, 13000).unwrap();
        assert_eq!(target.sm(), 90);
    }

    #[test]
    fn pre_volta_is_rejected() {
        assert!(PtxTarget::for_device(6, 1, 13000).is_err());
        assert!(PtxTarget::new(61, PtxIsa::new(9, 0)).is_err());
    }
}

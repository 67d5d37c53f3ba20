//! How PTX becomes a loaded module: in this process (`cuModuleLoadDataEx`, the default), or
//! isolated, compiled to a cubin by a helper process so that a crash of the driver's PTX
//! compiler kills the helper and fails one dispatch instead of killing the caller.
//!
//! The driver's JIT is NVIDIA's PTX compiler running inside the calling process. It has
//! crashed (SIGSEGV) on legal PTX: `../shared/regressions/ptxas-crash-1` killed a user's
//! process in `dispatch`. The emitter avoids every shape known to crash it (see
//! `Lowerer::branch_pred`) and the fuzz gate sweeps for new ones, but a sweep proves
//! nothing about the next program. With `VYRE_CUDA_JIT_HELPER` (or
//! [`CudaOptions::jit_helper`](super::CudaOptions::jit_helper)) naming a helper executable
//! (`vyre-cuda-jit`, this crate's binary, or any program that calls [`serve`]), every
//! module is compiled there through the driver's linker API and only the cubin is loaded
//! here. (The linker's route differs from `cuModuleLoadDataEx`'s: the PTX that crashed the
//! in-process JIT compiles through it; its kernels ran the fixture corpus byte-identical.)
//!
//! The helper is one persistent process per backend, started on the first compilation and
//! again after it dies; compilations through it are serialised. Protocol over its stdin and
//! stdout: a request is a little-endian `u64` length and the PTX bytes; a reply is a tag
//! byte (0: cubin, 1: error text), a little-endian `u64` length and the bytes.

use crate::driver::{compile_to_cubin, Device, DriverError, JitSettings, Module};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};

/// Environment variable naming the JIT helper executable (unset: compile in-process).
pub const JIT_HELPER_ENV: &str = "VYRE_CUDA_JIT_HELPER";

/// The helper's command-line flag selecting the device ordinal.
const DEVICE_FLAG: &str = "--device";

/// Largest message either side accepts (PTX in, cubin out).
const MAX_MESSAGE_BYTES: u64 = 1 << 30;

const TAG_CUBIN: u8 = 0;
const TAG_ERROR: u8 = 1;

/// Why a module did not load.
#[derive(Debug)]
pub(crate) enum LoadError {
    /// A driver call of this process failed.
    Driver(DriverError),
    /// The helper failed on this kernel: it died (the compiler crashed) or reported an
    /// error compiling it.
    Helper(String),
    /// The helper could not be started (no such executable, not executable).
    HelperUnavailable(String),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Driver(e) => write!(f, "{e}"),
            Self::Helper(message) | Self::HelperUnavailable(message) => f.write_str(message),
        }
    }
}

/// Where PTX is compiled.
pub(crate) enum Jit {
    /// The driver's JIT in this process, at this `CU_JIT_OPTIMIZATION_LEVEL` (`None`: the
    /// driver's default).
    InProcess {
        optimization_level: Option<u32>,
    },
    Isolated(IsolatedJit),
}

impl Jit {
    pub(crate) fn new(
        helper: Option<PathBuf>,
        device: usize,
        optimization_level: Option<u32>,
    ) -> Self {
        match helper {
            None => Self::InProcess { optimization_level },
            Some(path) => Self::Isolated(IsolatedJit {
                helper: path,
                device,
                process: Mutex::new(None),
            }),
        }
    }

    /// Compile (here or in the helper) and load `ptx` on `device`; in process, its
    /// functions compiled on `split` threads when given (the helper compiles serially).
    pub(crate) fn load(
        &self,
        device: &Arc<Device>,
        ptx: &str,
        split: Option<u32>,
    ) -> Result<Arc<Module>, LoadError> {
        match self {
            Self::InProcess { optimization_level } => {
                let settings = JitSettings {
                    split_threads: split,
                    optimization_level: *optimization_level,
                };
                Module::load_ptx_with(device, ptx, settings).map_err(LoadError::Driver)
            }
            Self::Isolated(isolated) => {
                let cubin = isolated.compile(ptx)?;
                Module::load_cubin(device, &cubin, ptx).map_err(LoadError::Driver)
            }
        }
    }

    /// Stop the helper, if one runs: it holds a CUDA context of its own (about half a GiB
    /// of device memory on an H200), which a backend's shutdown must give back.
    pub(crate) fn stop(&self) {
        if let Self::Isolated(isolated) = self {
            let running = match isolated.process.lock() {
                Ok(mut slot) => slot.take(),
                Err(poisoned) => poisoned.into_inner().take(),
            };
            drop(running);
        }
    }
}

/// The client side of the helper.
pub(crate) struct IsolatedJit {
    helper: PathBuf,
    device: usize,
    process: Mutex<Option<HelperProcess>>,
}

/// A running helper, killed and reaped on drop.
struct HelperProcess {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Drop for HelperProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl IsolatedJit {
    /// The cubin of `ptx`, or why there is none.
    fn compile(&self, ptx: &str) -> Result<Vec<u8>, LoadError> {
        let mut slot = self
            .process
            .lock()
            .map_err(|_| LoadError::Helper("the JIT helper's lock was poisoned".to_string()))?;
        if slot.is_none() {
            *slot = Some(self.spawn().map_err(LoadError::HelperUnavailable)?);
        }
        let process = slot.as_mut().expect("spawned above");
        match exchange(process, ptx.as_bytes()) {
            Ok((TAG_CUBIN, cubin)) => Ok(cubin),
            Ok((_, text)) => Err(LoadError::Helper(format!(
                "the JIT helper could not compile the kernel: {}",
                String::from_utf8_lossy(&text)
            ))),
            Err(io) => {
                // The helper is gone (its compiler crashed) or its pipe broke: reap it and
                // start a fresh one for the next kernel.
                let mut dead = slot.take().expect("present above");
                let status = match dead.child.try_wait() {
                    Ok(Some(status)) => status.to_string(),
                    _ => {
                        let _ = dead.child.kill();
                        dead.child
                            .wait()
                            .map_or_else(|e| e.to_string(), |s| s.to_string())
                    }
                };
                Err(LoadError::Helper(format!(
                    "the JIT helper {} died while compiling this kernel ({status}; {io}): \
                     the driver's PTX compiler crashed on it, and this process lives on",
                    self.helper.display()
                )))
            }
        }
    }

    fn spawn(&self) -> Result<HelperProcess, String> {
        let mut child = Command::new(&self.helper)
            .arg(DEVICE_FLAG)
            .arg(self.device.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the JIT helper {}: {e}", self.helper.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the JIT helper's pipes were not set up".to_string());
        };
        Ok(HelperProcess {
            child,
            stdin: BufWriter::new(stdin),
            stdout: BufReader::new(stdout),
        })
    }
}

fn exchange(process: &mut HelperProcess, request: &[u8]) -> std::io::Result<(u8, Vec<u8>)> {
    write_message(&mut process.stdin, None, request)?;
    process.stdin.flush()?;
    let mut tag = [0u8; 1];
    process.stdout.read_exact(&mut tag)?;
    Ok((tag[0], read_message(&mut process.stdout)?))
}

fn write_message(out: &mut impl Write, tag: Option<u8>, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(tag) = tag {
        out.write_all(&[tag])?;
    }
    out.write_all(&(bytes.len() as u64).to_le_bytes())?;
    out.write_all(bytes)
}

fn read_message(input: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 8];
    input.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    if len > MAX_MESSAGE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "a JIT helper message of {len} bytes is over the {MAX_MESSAGE_BYTES}-byte limit"
            ),
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    input.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// The helper's main loop: compile each PTX request from stdin to a cubin for the device
/// given by `--device N` (default 0) and reply on stdout, until stdin closes. Returns the
/// process exit code. `vyre-cuda-jit` is exactly `std::process::exit(serve())`; an
/// application may instead call it from its own binary (e.g. behind a command-line switch)
/// and point `VYRE_CUDA_JIT_HELPER` at that.
#[must_use]
pub fn serve() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let device = match args.as_slice() {
        [] => Ok(0),
        [flag, n] if flag == DEVICE_FLAG => n.parse::<usize>().map_err(|_| n.clone()),
        _ => Err(args.join(" ")),
    };
    let device = match device {
        Ok(ordinal) => Device::open(ordinal).map_err(|e| e.to_string()),
        Err(bad) => Err(format!(
            "usage: vyre-cuda-jit [{DEVICE_FLAG} N] (got {bad:?})"
        )),
    };
    let mut input = BufReader::new(std::io::stdin().lock());
    let mut output = BufWriter::new(std::io::stdout().lock());
    loop {
        let request = match read_message(&mut input) {
            Ok(request) => request,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return 0,
            Err(_) => return 2,
        };
        let reply = match &device {
            Err(e) => Err(format!("the JIT helper could not open the device: {e}")),
            Ok(device) => String::from_utf8(request)
                .map_err(|_| "the request is not UTF-8 PTX text".to_string())
                .and_then(|ptx| compile_to_cubin(device, &ptx).map_err(|e| e.to_string())),
        };
        let written = match reply {
            Ok(cubin) => write_message(&mut output, Some(TAG_CUBIN), &cubin),
            Err(text) => write_message(&mut output, Some(TAG_ERROR), text.as_bytes()),
        };
        if written.and_then(|()| output.flush()).is_err() {
            return 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let mut wire = Vec::new();
        write_message(&mut wire, Some(TAG_ERROR), b"bad").unwrap();
        assert_eq!(wire[0], TAG_ERROR);
        assert_eq!(read_message(&mut &wire[1..]).unwrap(), b"bad");
    }

    #[test]
    fn an_oversized_length_is_refused_before_allocating() {
        let wire = (MAX_MESSAGE_BYTES + 1).to_le_bytes();
        assert!(read_message(&mut &wire[..]).is_err());
    }

    /// An executable `sh` script running `body`, in a fresh directory named after `tag` and
    /// this process (returned for removal). Written by a child process: a file this process
    /// held open for writing could be inherited by a child another test forks at that
    /// moment, and executing it would then fail with "Text file busy" (ETXTBSY) until that
    /// child execs.
    #[cfg(unix)]
    fn helper_script(tag: &str, body: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("helper");
        let written = std::process::Command::new("sh")
            .arg("-c")
            .arg("printf '#!/bin/sh\\n%s\\n' \"$2\" > \"$1\" && chmod 755 \"$1\"")
            .arg("sh")
            .arg(&script)
            .arg(body)
            .status()
            .unwrap();
        assert!(written.success());
        (dir, script)
    }

    /// A helper that dies the way a crashing compiler does (SIGSEGV) fails the kernel with
    /// a clear error, and the next compilation starts a fresh helper.
    #[cfg(unix)]
    #[test]
    fn a_helper_that_crashes_is_reported_and_replaced() {
        let (dir, script) = helper_script("vyre-cuda-jit-test", "kill -SEGV $$");
        let jit = IsolatedJit {
            helper: script,
            device: 0,
            process: Mutex::new(None),
        };
        for _ in 0..2 {
            let error = jit.compile(".version 7.8").unwrap_err().to_string();
            assert!(error.contains("died while compiling"), "{error}");
            assert!(
                error.contains("SIGSEGV") || error.contains("signal: 11"),
                "{error}"
            );
            assert!(jit.process.lock().unwrap().is_none());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `stop` kills and reaps a running helper (a backend's shutdown gives its context back).
    #[cfg(target_os = "linux")]
    #[test]
    fn stop_ends_the_running_helper() {
        let (dir, script) = helper_script("vyre-cuda-jit-stop", "exec sleep 600");
        let jit = Jit::new(Some(script), 0, None);
        let Jit::Isolated(isolated) = &jit else {
            unreachable!("a helper path gives an isolated JIT")
        };
        let pid = {
            let mut slot = isolated.process.lock().unwrap();
            let process = isolated.spawn().unwrap();
            let pid = process.child.id();
            *slot = Some(process);
            pid
        };
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        assert!(proc_dir.exists());
        jit.stop();
        assert!(isolated.process.lock().unwrap().is_none());
        assert!(
            !proc_dir.exists(),
            "the helper {pid} still runs (or was not reaped)"
        );
        jit.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_helper_is_a_clear_error() {
        let jit = IsolatedJit {
            helper: PathBuf::from("/nonexistent/vyre-cuda-jit"),
            device: 0,
            process: Mutex::new(None),
        };
        match jit.compile(".version 7.8") {
            Err(LoadError::HelperUnavailable(error)) => {
                assert!(error.contains("cannot start the JIT helper"), "{error}")
            }
            other => panic!("expected HelperUnavailable, got {other:?}"),
        }
    }
}

//! Scratch (tests/zz_scratch.rs during the session): launch PTX variants of the hang
//! directly, each in a child process. Four buffers, four counts, the fault area.
use cudarc::driver::CudaContext;
use std::io::Write;

fn launch_one(path: &str) {
    use cudarc::driver::sys;
    let t = std::time::Instant::now();
    let say = |s: &str| {
        eprintln!("[{:>8.3}s] {s}", t.elapsed().as_secs_f64());
        let _ = std::io::stderr().flush();
    };
    let ctx = CudaContext::new(0).unwrap();
    ctx.bind_to_thread().unwrap();
    say("context");
    let src = std::ffi::CString::new(std::fs::read_to_string(path).unwrap()).unwrap();
    unsafe {
        let mut module = std::ptr::null_mut();
        let r = sys::cuModuleLoadData(&mut module, src.as_ptr().cast());
        say(&format!("module load {r:?}"));
        let mut f = std::ptr::null_mut();
        let r = sys::cuModuleGetFunction(&mut f, module, c"vyre_main".as_ptr());
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        let nb = 4;
        let mut ptrs = vec![0u64; nb + 1];
        for (i, p) in ptrs.iter_mut().enumerate() {
            let mut host = vec![0u8; 256];
            if i == 2 {
                host[..4].copy_from_slice(&3u32.to_le_bytes());
            }
            assert_eq!(sys::cuMemAlloc_v2(p, 256), sys::CUresult::CUDA_SUCCESS);
            assert_eq!(sys::cuMemcpyHtoD_v2(*p, host.as_ptr().cast(), 256), sys::CUresult::CUDA_SUCCESS);
        }
        let n: Vec<u32> = vec![1; nb];
        let mut args: Vec<*mut std::ffi::c_void> = Vec::new();
        for p in ptrs.iter().take(nb) {
            args.push(p as *const u64 as *mut _);
        }
        for x in &n {
            args.push(x as *const u32 as *mut _);
        }
        args.push(&ptrs[nb] as *const u64 as *mut _);
        let r = sys::cuLaunchKernel(f, 1, 1, 1, 8, 4, 1, 0, std::ptr::null_mut(), args.as_mut_ptr(), std::ptr::null_mut());
        say(&format!("launched {r:?}"));
        let r = sys::cuCtxSynchronize();
        let mut fault = [0u32; 4];
        sys::cuMemcpyDtoH_v2(fault.as_mut_ptr().cast(), ptrs[nb], 16);
        say(&format!("synchronized {r:?}; fault word {fault:?}"));
    }
}

#[test]
fn scratch_launch_variants() {
    if let Ok(p) = std::env::var("ONE_PTX") {
        launch_one(&p);
        return;
    }
    let Ok(dir) = std::env::var("PTX_DIR") else { return; };
    let limit = std::time::Duration::from_secs(std::env::var("LIMIT").ok().and_then(|s| s.parse().ok()).unwrap_or(8));
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "ptx")).collect();
    files.sort();
    for p in files {
        let start = std::time::Instant::now();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "scratch_launch_variants", "--nocapture"])
            .env("ONE_PTX", &p).env_remove("PTX_DIR")
            .stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped())
            .spawn().unwrap();
        let verdict = loop {
            if let Some(st) = child.try_wait().unwrap() { break format!("exit {st}"); }
            if start.elapsed() > limit { let _ = child.kill(); let _ = child.wait(); break "HANG".to_string(); }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut err = String::new();
        use std::io::Read;
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        let last: Vec<&str> = err.lines().filter(|l| l.starts_with('[')).collect();
        println!("{}: {verdict} after {:.2}s; {}", p.file_name().unwrap().to_string_lossy(), start.elapsed().as_secs_f64(), last.join(" | "));
    }
}

//! The probe of call 1 (built as a scratch test file, tests/zz_scratch.rs, not kept in the
//! tree; run as `CUDA_CACHE_DISABLE=1 PROBE_DIR=<the bundle's ptx/v45> zz_probe --nocapture`):
//! does a JIT on a background thread slow the JITs of a foreground thread?
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;
use vyre_cuda::driver::{device_count, driver_library_present, Device, JitSettings, Module};

fn modules() -> Vec<(String, String)> {
    let dir = std::env::var("PROBE_DIR").unwrap_or_default();
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_else(|_| Vec::new());
    v.sort();
    v.into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "ptx"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect()
}

fn salted(text: &str, salt: u64) -> String {
    let at = text.find(".address_size").map(|i| i + text[i..].find('\n').unwrap() + 1).unwrap();
    format!("{}.global .u32 vyre_probe_salt_{salt};\n{}", &text[..at], &text[at..])
}

fn jit(device: &Arc<Device>, text: &str, level: Option<u32>) -> f64 {
    let t = Instant::now();
    let m = Module::load_ptx_with(device, text, JitSettings { split_threads: None, optimization_level: level });
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if let Err(e) = m { eprintln!("jit failed: {e}"); }
    ms
}

#[test]
fn background_jit_probe() {
    if !driver_library_present() || device_count().unwrap_or(0) == 0 { println!("skipped: no CUDA device"); return; }
    let mods = modules();
    if mods.is_empty() { println!("skipped: no PROBE_DIR"); return; }
    let device = Device::open(0).unwrap();
    let mut salt = 1u64;
    for lvl in [Some(0u32), Some(1), None] {
        let mut sum = 0.0;
        for (_, text) in &mods { salt += 1; sum += jit(&device, &salted(text, salt), lvl); }
        println!("alone: level {lvl:?}: sum {sum:.0} ms over {} modules", mods.len());
    }
    for fg in [Some(0u32), Some(1)] {
        let (tx, rx) = mpsc::channel::<String>();
        let dev2 = Arc::clone(&device);
        let bg = std::thread::spawn(move || {
            let mut sum = 0.0; let mut n = 0;
            for text in rx { sum += jit(&dev2, &text, None); n += 1; }
            (sum, n)
        });
        let started = Instant::now();
        let mut sum = 0.0;
        for (_, text) in &mods {
            salt += 1;
            sum += jit(&device, &salted(text, salt), fg);
            salt += 1;
            tx.send(salted(text, salt)).unwrap();
        }
        let fg_wall = started.elapsed().as_secs_f64() * 1e3;
        drop(tx);
        let (bsum, n) = bg.join().unwrap();
        let all = started.elapsed().as_secs_f64() * 1e3;
        println!("tiered: foreground level {fg:?}: sum {sum:.0} ms (wall {fg_wall:.0}); background O4 {n} modules {bsum:.0} ms, all done at {all:.0} ms");
    }
}

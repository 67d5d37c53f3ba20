//! The vyre-libs workloads without a GPU: every program builds at both sizes with inputs
//! of the declared sizes, runs on vyre-reference at its small size, and the reference's
//! answer matches an independent host computation (exact for the integer workloads; for
//! the f32 ones, within 1e-3 of the f64 result, relative or, below magnitude 1, absolute:
//! far above f32 rounding, far below any wrong formula). This proves the builders, the inputs and the small-size
//! check the GPU rows rely on.

#[allow(dead_code)]
#[path = "../src/programs.rs"]
mod programs;

#[allow(dead_code)]
#[path = "../src/workloads/libs/build.rs"]
mod build;

use build::{Bound, Spec};
use std::collections::BTreeSet;

fn spec(id: &str) -> Spec {
    build::specs()
        .into_iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("no workload {id}"))
}

/// The reference's outputs for `spec` at its small size, with the inputs it ran on.
fn run_small(spec: &Spec) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let program = (spec.build)(spec.small).expect("builds");
    let inputs = build::inputs(&program, (spec.data)(spec.small)).expect("inputs");
    let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let out = programs::reference(&program, &borrowed)
        .unwrap_or_else(|e| panic!("{}: reference failed: {e}", spec.id));
    (inputs, out)
}

fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    u32s(bytes).into_iter().map(f32::from_bits).collect()
}

fn assert_close(id: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{id}: output length");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(*g) - w).abs() / w.abs().max(1.0);
        assert!(err < 1e-3, "{id}: element {k}: got {g}, host {w}");
    }
}

#[test]
fn ids_are_unique_and_selected_by_the_libs_prefix() {
    let specs = build::specs();
    let ids: BTreeSet<&str> = specs.iter().map(|s| s.id).collect();
    assert_eq!(ids.len(), specs.len(), "duplicate ids");
    assert_eq!(specs.len(), 14, "{} workloads", specs.len());
    for s in &specs {
        assert!(s.id.starts_with(build::PREFIX), "{}", s.id);
        assert!(s.small < s.large, "{}: small size not smaller", s.id);
        let compute = s.id.starts_with("libs_matmul") || s.id == "libs_flash_attention";
        assert_eq!(s.bound == Bound::Compute, compute, "{}", s.id);
    }
}

#[test]
fn every_workload_builds_at_both_sizes_and_runs_on_the_reference() {
    for spec in build::specs() {
        for size in [spec.small, spec.large] {
            let program = (spec.build)(size).expect("builds");
            let inputs = build::inputs(&program, (spec.data)(size))
                .unwrap_or_else(|e| panic!("{} at {size}: {e}", spec.id));
            assert!(!inputs.is_empty(), "{}: no inputs", spec.id);
            let bytes = build::moved_bytes(&program).expect("4-byte buffers");
            assert!(bytes > 0.0);
        }
        let started = std::time::Instant::now();
        let (_, out) = run_small(&spec);
        assert!(
            out.iter().any(|o| o.iter().any(|&b| b != 0)),
            "{}: the reference's outputs are all zero",
            spec.id
        );
        println!(
            "{}: reference at {} {} in {:.2} s, {} outputs",
            spec.id,
            spec.small,
            spec.unit,
            started.elapsed().as_secs_f64(),
            out.len()
        );
    }
}

#[test]
fn matmuls_match_a_host_wrapping_matmul() {
    for id in ["libs_matmul", "libs_matmul_tiled"] {
        let s = spec(id);
        let d = s.small as usize;
        let (inputs, out) = run_small(&s);
        let (a, b) = (u32s(&inputs[0]), u32s(&inputs[1]));
        let mut want = vec![0u32; d * d];
        for i in 0..d {
            for j in 0..d {
                want[i * d + j] = (0..d).fold(0u32, |acc, k| {
                    acc.wrapping_add(a[i * d + k].wrapping_mul(b[k * d + j]))
                });
            }
        }
        assert_eq!(out.len(), 1, "{id}");
        assert_eq!(&u32s(&out[0])[..d * d], &want[..], "{id}");
    }
}

#[test]
fn prefix_sum_matches_a_host_scan() {
    let s = spec("libs_prefix_sum");
    let (inputs, out) = run_small(&s);
    let program = (s.build)(s.small).expect("builds");
    let names: Vec<&str> = program.buffers().iter().map(|d| d.name()).collect();
    // The multi-block scan returns its block partials too: find the scan's own output.
    let k = vyre_reference::output_index(&program, "output")
        .unwrap_or_else(|| panic!("no output named `output` among {names:?}"));
    let mut acc = 0u32;
    let want: Vec<u32> = (u32s(&inputs[0]).into_iter())
        .map(|x| {
            acc = acc.wrapping_add(x);
            acc
        })
        .collect();
    assert_eq!(u32s(&out[k]), want);
}

/// A host base64 decoder (standard alphabet, `=` padding).
fn decode_base64(text: &[u8]) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    for quad in text.chunks_exact(4) {
        let pad = quad.iter().filter(|&&c| c == b'=').count();
        let bits = (quad.iter().take(4 - pad))
            .enumerate()
            .fold(0u32, |acc, (k, &c)| {
                acc | u32::from(value(c)) << (18 - 6 * k)
            });
        out.extend(bits.to_be_bytes()[1..4 - pad].iter());
    }
    out
}

#[test]
fn conv1d_matches_a_host_clamped_convolution() {
    let s = spec("libs_conv1d");
    let data = (s.data)(s.small);
    let (_, out) = run_small(&s);
    let (input, weights) = (u32s(&data[0]), u32s(&data[2]));
    let (n, r) = (input.len() as i64, i64::from(build::CONV1D_RADIUS));
    let want: Vec<u32> = (0..n)
        .map(|i| {
            (0..=2 * r).fold(0u32, |acc, k| {
                let src = (i + k - r).clamp(0, n - 1) as usize;
                acc.wrapping_add(input[src].wrapping_mul(weights[k as usize]))
            })
        })
        .collect();
    assert_eq!(u32s(&out[0]), want);
}

#[test]
fn base64_decodes_what_a_host_decoder_does() {
    let s = spec("libs_base64_decode");
    let (_, out) = run_small(&s);
    let want = decode_base64(&build::base64_text(s.small as usize));
    assert_eq!(out.len(), 2, "decoded bytes and their count");
    assert_eq!(u32s(&out[1]), vec![want.len() as u32]);
    let got: Vec<u8> = u32s(&out[0]).iter().map(|&w| w as u8).collect();
    assert_eq!(&got[..want.len()], &want[..]);
}

#[test]
fn inflate_returns_the_stored_payload() {
    let s = spec("libs_inflate_stored");
    let (_, out) = run_small(&s);
    let block = build::stored_block(s.small as usize - 5);
    assert_eq!(out.len(), 2, "inflated bytes and their count");
    assert_eq!(u32s(&out[1]), vec![s.small - 5]);
    assert_eq!(
        u32s(&out[0])[..block.len() - 5],
        u32s(&build::words(&block[5..]))[..]
    );
}

#[test]
fn norms_match_host_formulas() {
    for id in ["libs_rms_norm", "libs_layer_norm"] {
        let s = spec(id);
        let (inputs, out) = run_small(&s);
        let x: Vec<f64> = f32s(&inputs[0]).into_iter().map(f64::from).collect();
        let n = x.len() as f64;
        let eps = f64::from(build::EPS);
        let want: Vec<f64> = if id == "libs_rms_norm" {
            let rms = (x.iter().map(|v| v * v).sum::<f64>() / n + eps).sqrt();
            x.iter().map(|v| v / rms).collect()
        } else {
            let mean = x.iter().sum::<f64>() / n;
            let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
            x.iter().map(|v| (v - mean) / (var + eps).sqrt()).collect()
        };
        assert_close(id, &f32s(&out[0]), &want);
    }
}

#[test]
fn activations_match_host_formulas() {
    let gelu = |x: f64| {
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
    };
    let s = spec("libs_gelu");
    let (inputs, out) = run_small(&s);
    let want: Vec<f64> = f32s(&inputs[0])
        .into_iter()
        .map(|x| gelu(f64::from(x)))
        .collect();
    assert_close("libs_gelu", &f32s(&out[0]), &want);

    let s = spec("libs_swiglu");
    let (inputs, out) = run_small(&s);
    let (gate, up) = (f32s(&inputs[0]), f32s(&inputs[1]));
    let want: Vec<f64> = (gate.iter().zip(&up))
        .map(|(&g, &u)| {
            let g = f64::from(g);
            g / (1.0 + (-g).exp()) * f64::from(u)
        })
        .collect();
    assert_close("libs_swiglu", &f32s(&out[0]), &want);
}

#[test]
fn conv2d_matches_a_host_convolution() {
    let s = spec("libs_conv2d_3x3");
    let side = s.small as usize;
    let (inputs, out) = run_small(&s);
    let (img, k) = (f32s(&inputs[0]), f32s(&inputs[1]));
    let at = |y: isize, x: isize| {
        let inside = (0..side as isize).contains(&y) && (0..side as isize).contains(&x);
        if inside {
            f64::from(img[y as usize * side + x as usize])
        } else {
            0.0
        }
    };
    let mut checked = 0;
    for y in 0..side as isize {
        for x in 0..side as isize {
            let (mut acc, mut magnitude) = (0.0, 0.0);
            for ky in 0..3 {
                for kx in 0..3 {
                    let term = at(y + ky - 1, x + kx - 1) * f64::from(k[(ky * 3 + kx) as usize]);
                    acc += term;
                    magnitude += term.abs();
                }
            }
            let got = f64::from(f32::from_bits(u32::from_le_bytes(
                out[0][(y as usize * side + x as usize) * 4..][..4]
                    .try_into()
                    .unwrap(),
            )));
            // Nine f32 roundings of terms up to `magnitude`: far under 1e-5 of it.
            assert!(
                (got - acc).abs() <= 1e-5 * magnitude,
                "pixel ({y}, {x}): got {got}, host {acc}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked * 4, out[0].len());
}

#[test]
fn softmax_matches_the_host_formula() {
    let s = spec("libs_softmax");
    let (inputs, out) = run_small(&s);
    let x: Vec<f64> = f32s(&inputs[0]).into_iter().map(f64::from).collect();
    let max = x.iter().copied().fold(f64::MIN, f64::max);
    let sum: f64 = x.iter().map(|v| (v - max).exp()).sum();
    let want: Vec<f64> = x.iter().map(|v| (v - max).exp() / sum).collect();
    // Outputs are ~1/n: compare relative to the largest.
    let top = want.iter().copied().fold(0.0, f64::max);
    for (k, (g, w)) in f32s(&out[0]).iter().zip(&want).enumerate() {
        assert!(
            (f64::from(*g) - w).abs() < 1e-4 * top,
            "element {k}: got {g}, host {w}"
        );
    }
}

#[test]
fn flash_attention_matches_host_attention() {
    let s = spec("libs_flash_attention");
    let (n, d) = (s.small as usize, build::HEAD_DIM as usize);
    let (inputs, out) = run_small(&s);
    let [q, k, v] =
        [0, 1, 2].map(|i| -> Vec<f64> { f32s(&inputs[i]).into_iter().map(f64::from).collect() });
    let scale = 1.0 / (d as f64).sqrt();
    let mut want = Vec::with_capacity(n * d);
    for row in 0..n {
        let scores: Vec<f64> = (0..n)
            .map(|j| scale * (0..d).map(|t| q[row * d + t] * k[j * d + t]).sum::<f64>())
            .collect();
        let max = scores.iter().copied().fold(f64::MIN, f64::max);
        let weights: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        for t in 0..d {
            want.push((0..n).map(|j| weights[j] * v[j * d + t]).sum::<f64>() / total);
        }
    }
    assert_eq!(out.len(), 1);
    assert_close("libs_flash_attention", &f32s(&out[0]), &want);
}

#[test]
fn quest_paging_selects_the_host_top_k() {
    let s = spec("libs_quest_paging");
    let (pages, k, d) = (
        s.small as usize,
        build::QUEST_K as usize,
        build::QUEST_D as usize,
    );
    let (inputs, out) = run_small(&s);
    let (query, meta) = (f32s(&inputs[0]), f32s(&inputs[1]));
    let scores: Vec<f64> = (0..pages)
        .map(|p| {
            (0..d)
                .map(|t| f64::from(query[t]) * f64::from(meta[p * d + t]))
                .sum()
        })
        .collect();
    let mut order: Vec<usize> = (0..pages).collect();
    order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));
    let mut want: Vec<u32> = order[..k].iter().map(|&p| p as u32).collect();
    want.resize(pages, 0);
    assert_eq!(out.len(), 2, "scores and the io queue");
    assert_eq!(u32s(&out[1]), want);
    // The selection overwrites each chosen page's score with its sentinel, f32::MIN.
    let left: Vec<f64> = (0..pages)
        .map(|p| match order[..k].contains(&p) {
            true => f64::from(f32::MIN),
            false => scores[p],
        })
        .collect();
    assert_close("libs_quest_paging scores", &f32s(&out[0]), &left);
}

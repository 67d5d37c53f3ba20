//! The user-style elementwise programs of the `saxpy_user` and `params_user` rows without a
//! GPU: vyre-reference's answer matches a host computation in f32, so the rows' checks
//! compare against the intended formula.

#[allow(dead_code)]
#[path = "../src/programs.rs"]
mod programs;

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `y` after one run of `program` on `inputs` (its only output).
fn reference_y(program: &vyre_foundation::ir::Program, inputs: &[Vec<u8>]) -> Vec<f32> {
    let borrowed: Vec<vyre_reference::value::Value> = inputs
        .iter()
        .map(|b| vyre_reference::value::Value::from(b.clone()))
        .collect();
    let outputs = vyre_reference::reference_eval(program, &borrowed).expect("reference runs");
    f32s(&outputs[0].to_bytes())
}

#[test]
fn params_user_is_a_clamped_mix_with_y_in_place() {
    let n = 300u32;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 40.0).collect();
    let y: Vec<f32> = (0..n).map(|i| 7.5 - i as f32 * 0.11).collect();
    let [scale, bias, lo, hi] = programs::PARAMS;
    let got = reference_y(
        &programs::params_user(n),
        &[bytes(&programs::PARAMS), bytes(&x), bytes(&y)],
    );
    let want: Vec<f32> = x
        .iter()
        .zip(&y)
        .map(|(&x, &y)| (scale * x + bias * y).max(lo).min(hi))
        .collect();
    assert_eq!(got, want);
    // Both bounds and the interior are reached, so the clamp is exercised.
    assert!(got.contains(&lo) && got.contains(&hi));
    assert!(got.iter().any(|v| *v > lo && *v < hi));
}

#[test]
fn saxpy_user_scales_by_the_buffered_alpha() {
    let n = 64u32;
    let x: Vec<f32> = (0..n).map(|i| i as f32 - 3.0).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.5 * i as f32).collect();
    let got = reference_y(
        &programs::saxpy_user(n),
        &[bytes(&[programs::ALPHA]), bytes(&x), bytes(&y)],
    );
    let want: Vec<f32> = x
        .iter()
        .zip(&y)
        .map(|(&x, &y)| programs::ALPHA * x + y)
        .collect();
    assert_eq!(got, want);
}

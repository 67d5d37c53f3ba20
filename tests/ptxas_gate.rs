//! Self-test of the offline PTX gate (`tests/common/ptxas.rs`): hand-written kernels that
//! must assemble, and broken PTX that must be rejected with ptxas's own message.

mod common;

use common::ptxas;

/// Vector add with a bounds check, PTX ISA 7.0 for sm_80.
const VADD_SM80: &str = r#"//
// vadd: c[i] = a[i] + b[i] for i < n (f32)
//
.version 7.0
.target sm_80
.address_size 64

.visible .entry vadd(
    .param .u64 vadd_param_a,
    .param .u64 vadd_param_b,
    .param .u64 vadd_param_c,
    .param .u32 vadd_param_n
)
{
    .reg .pred  %p<2>;
    .reg .b32   %r<6>;
    .reg .f32   %f<4>;
    .reg .b64   %rd<11>;

    ld.param.u64        %rd1, [vadd_param_a];
    ld.param.u64        %rd2, [vadd_param_b];
    ld.param.u64        %rd3, [vadd_param_c];
    ld.param.u32        %r2, [vadd_param_n];
    mov.u32             %r3, %ctaid.x;
    mov.u32             %r4, %ntid.x;
    mov.u32             %r5, %tid.x;
    mad.lo.s32          %r1, %r3, %r4, %r5;
    setp.ge.u32         %p1, %r1, %r2;
    @%p1 bra            $L__done;
    cvta.to.global.u64  %rd4, %rd1;
    cvta.to.global.u64  %rd5, %rd2;
    cvta.to.global.u64  %rd6, %rd3;
    mul.wide.u32        %rd7, %r1, 4;
    add.s64             %rd8, %rd4, %rd7;
    add.s64             %rd9, %rd5, %rd7;
    add.s64             %rd10, %rd6, %rd7;
    ld.global.f32       %f1, [%rd8];
    ld.global.f32       %f2, [%rd9];
    add.f32             %f3, %f1, %f2;
    st.global.f32       [%rd10], %f3;
$L__done:
    ret;
}
"#;

/// Vector add (u32, wrapping) with a bounds check, PTX ISA 7.8 for sm_90. It reads
/// `%clusterid.x` (sm_90 only), so it proves the gate really assembles for sm_90.
const VADD_SM90: &str = r#"//
// vadd_u32: c[i] = a[i] + b[i] + clusterid.x for i < n (u32)
//
.version 7.8
.target sm_90
.address_size 64

.visible .entry vadd_u32(
    .param .u64 vadd_u32_param_a,
    .param .u64 vadd_u32_param_b,
    .param .u64 vadd_u32_param_c,
    .param .u32 vadd_u32_param_n
)
{
    .reg .pred  %p<2>;
    .reg .b32   %r<11>;
    .reg .b64   %rd<11>;

    ld.param.u64        %rd1, [vadd_u32_param_a];
    ld.param.u64        %rd2, [vadd_u32_param_b];
    ld.param.u64        %rd3, [vadd_u32_param_c];
    ld.param.u32        %r2, [vadd_u32_param_n];
    mov.u32             %r3, %ctaid.x;
    mov.u32             %r4, %ntid.x;
    mov.u32             %r5, %tid.x;
    mad.lo.s32          %r1, %r3, %r4, %r5;
    setp.ge.u32         %p1, %r1, %r2;
    @%p1 bra            $L__done;
    cvta.to.global.u64  %rd4, %rd1;
    cvta.to.global.u64  %rd5, %rd2;
    cvta.to.global.u64  %rd6, %rd3;
    mul.wide.u32        %rd7, %r1, 4;
    add.s64             %rd8, %rd4, %rd7;
    add.s64             %rd9, %rd5, %rd7;
    add.s64             %rd10, %rd6, %rd7;
    ld.global.u32       %r6, [%rd8];
    ld.global.u32       %r7, [%rd9];
    mov.u32             %r8, %clusterid.x;
    add.u32             %r9, %r6, %r7;
    add.u32             %r10, %r9, %r8;
    st.global.u32       [%rd10], %r10;
$L__done:
    ret;
}
"#;

#[test]
fn valid_sm80_kernel_assembles() {
    let Some(ptxas) = ptxas::require_ptxas() else {
        return;
    };
    ptxas::assemble_for(&ptxas, VADD_SM80).unwrap_or_else(|e| panic!("{e}"));
    // `.target sm_80` PTX is also valid input for newer architectures.
    ptxas::assemble_all_targets(&ptxas, VADD_SM80).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn valid_sm90_kernel_assembles() {
    let Some(ptxas) = ptxas::require_ptxas() else {
        return;
    };
    ptxas::assemble_for(&ptxas, VADD_SM90).unwrap_or_else(|e| panic!("{e}"));
    ptxas::assemble(&ptxas, VADD_SM90, 90).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn sm90_kernel_is_rejected_for_sm80() {
    let Some(ptxas) = ptxas::require_ptxas() else {
        return;
    };
    let err =
        ptxas::assemble(&ptxas, VADD_SM90, 80).expect_err("sm_90 PTX must not pass -arch=sm_80");
    assert!(err.contains("-arch=sm_80"), "{err}");
    assert!(ptxas::assemble_all_targets(&ptxas, VADD_SM90).is_err());
}

#[test]
fn undefined_register_is_rejected_with_ptxas_message() {
    let Some(ptxas) = ptxas::require_ptxas() else {
        return;
    };
    let broken = VADD_SM80.replace(
        "add.f32             %f3, %f1, %f2;",
        "add.f32             %f3, %f1, %f99;",
    );
    assert_ne!(
        broken, VADD_SM80,
        "the test kernel changed; update the replacement"
    );
    let err =
        ptxas::assemble_for(&ptxas, &broken).expect_err("undefined register must be rejected");
    // ptxas's own diagnostic, naming the bad operand ...
    assert!(err.contains("error"), "{err}");
    assert!(err.contains("%f99"), "{err}");
    // ... and the numbered PTX listing.
    assert!(err.contains("   5 | .target sm_80"), "{err}");
}

#[test]
fn syntax_error_is_rejected() {
    let Some(ptxas) = ptxas::require_ptxas() else {
        return;
    };
    let broken = VADD_SM90.replace("ret;", "ret");
    let err = ptxas::assemble_for(&ptxas, &broken).expect_err("syntax error must be rejected");
    assert!(err.contains("ptxas -arch=sm_90 failed"), "{err}");
    assert!(err.contains("syntax error"), "{err}");
}

#[test]
fn ptx_target_is_parsed() {
    assert_eq!(ptxas::ptx_target(VADD_SM80).as_deref(), Some("sm_80"));
    assert_eq!(ptxas::ptx_target(VADD_SM90).as_deref(), Some("sm_90"));
    assert_eq!(
        ptxas::ptx_target(".version 8.0\n  .target sm_90a, debug // comment\n").as_deref(),
        Some("sm_90a")
    );
    assert_eq!(ptxas::ptx_target("// .target sm_70\n.version 7.0\n"), None);
    assert_eq!(ptxas::ptx_target(".targets sm_80\n"), None);
}

#[test]
fn ptx_without_target_is_an_error() {
    // No ptxas run happens: the missing `.target` is reported first.
    let err = ptxas::assemble_for(std::path::Path::new("/nonexistent/ptxas"), ".version 7.0\n")
        .expect_err("no .target");
    assert!(err.contains(".target"), "{err}");
}

/// The batched gate (`common::ptxas_batch`): kernels that each declare the same
/// module-scope item, or one name with two texts, assemble together; a broken kernel
/// among them is found and named with ptxas's message, and so is every kernel of the
/// same text.
#[test]
fn batched_kernels_share_their_items_and_a_broken_one_is_named() {
    use common::ptxas_batch::{assemble_everywhere, Kernel};
    let Some(ptxas) = ptxas::require_ptxas() else {
        return;
    };
    let zero_page = ".global .align 16 .b8 vyre_zero_page[16];";
    let wider_page = ".global .align 16 .b8 vyre_zero_page[32];";
    let kernel = |i: usize| {
        let item = if i % 7 == 0 { wider_page } else { zero_page };
        let ptx = VADD_SM80
            .replace(".visible .entry", &format!("{item}\n\n.visible .entry"))
            .replace(
                "mov.u32             %r5, %tid.x;",
                &format!("mov.u32             %r5, %tid.x;\n    add.u32 %r5, %r5, {i};"),
            );
        Kernel {
            id: format!("k{i}"),
            ptx,
        }
    };
    let mut kernels: Vec<Kernel> = (0..40).map(kernel).collect();
    assert_eq!(kernels[3].ptx.matches("add.u32 %r5, %r5, 3;").count(), 1);
    let refused = assemble_everywhere(&ptxas, &kernels);
    assert!(refused.is_empty(), "{refused:?}");

    kernels[23].ptx = kernels[23].ptx.replace("%f1, %f2;", "%f1, %f99;");
    assert_ne!(kernels[23].ptx, kernel(23).ptx);
    kernels.push(Kernel {
        id: "k23-again".into(),
        ptx: kernels[23].ptx.clone(),
    });
    let refused = assemble_everywhere(&ptxas, &kernels);
    let mut named: Vec<(&str, &str)> = refused
        .iter()
        .map(|r| (r.id.as_str(), r.compiler))
        .collect();
    named.sort();
    let compilers = common::ptxas_batch::compilers(&ptxas);
    let mut expected: Vec<(&str, &str)> = ["k23", "k23-again"]
        .into_iter()
        .flat_map(|id| compilers.iter().map(move |(label, _)| (id, *label)))
        .collect();
    expected.sort();
    assert_eq!(named, expected);
    assert!(refused
        .iter()
        .all(|r| r.error.contains("%f99") && r.arch == "sm_80"));
}

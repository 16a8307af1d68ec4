//! Kernels that fail on purpose, for checking the service's fault handling on a real GPU
//! (`hopfuse serve --fault-kernels`, then `POST /api/run` with `"fault": "deadlock"` etc.):
//! a kernel that waits on an mbarrier nobody arrives on (the service must kill it at the
//! wall-clock limit), one that stores to an unmapped address (a CUDA error result), and one that
//! NVRTC rejects (an NVRTC error result). They run through the same engine as every program.

use crate::engine::{self, Device, Hooks, Progress, RunError, RunRequest, RunResult, Setup, Stage};
use hopfuse::plan::{Param, SizeExpr as E, TensorRole};
use hopfuse::{DType, IndexType, LaunchPlan};
use std::collections::BTreeMap;

// The enum is part of `POST /api/run`'s body, so it is defined in `hopfuse-api`.
pub use hopfuse_api::run::Fault;

/// The kernel's name.
pub fn kernel(fault: Fault) -> &'static str {
    match fault {
        Fault::Deadlock => "fault_deadlock",
        Fault::IllegalAddress => "fault_illegal_address",
        Fault::NvrtcError => "fault_nvrtc_error",
    }
}

/// The kernel's CUDA source.
pub fn cuda(fault: Fault) -> &'static str {
    match fault {
        Fault::Deadlock => DEADLOCK,
        Fault::IllegalAddress => ILLEGAL_ADDRESS,
        Fault::NvrtcError => NVRTC_ERROR,
    }
}

const DEADLOCK: &str = r#"
extern "C" __global__ void __launch_bounds__(256) fault_deadlock(float* y, int N) {
    __shared__ __align__(8) unsigned long long bar;
    unsigned addr = (unsigned)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) {
        // One arrival expected; nobody ever arrives, so phase 0 never completes.
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(addr) : "memory");
    }
    __syncthreads();
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
        "@!done bra WAIT;\n"
        "}\n" :: "r"(addr) : "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i] = 0.0f;
}
"#;

const ILLEGAL_ADDRESS: &str = r#"
extern "C" __global__ void __launch_bounds__(256) fault_illegal_address(float* y, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        volatile float* bad = (volatile float*)(16ull + 4ull * (unsigned long long)i);
        *bad = 1.0f;
        y[i] = 0.0f;
    }
}
"#;

const NVRTC_ERROR: &str = r#"
extern "C" __global__ void fault_nvrtc_error(float* y, int N) {
    this is not CUDA;
}
"#;

/// The plan every fault kernel shares: `y: f32[N]` written by `ceil(N / 256)` blocks of 256.
pub fn plan(fault: Fault) -> LaunchPlan {
    let n = E::sym("N");
    LaunchPlan {
        kernel_name: kernel(fault).into(),
        index_type: IndexType::I32,
        symbols: vec!["N".into()],
        params: vec![
            Param::Tensor {
                name: "y".into(),
                dtype: DType::F32,
                role: TensorRole::Output,
                shape: vec![n.clone()],
            },
            Param::Size { symbol: "N".into() },
        ],
        grid: [
            E::CeilDiv(Box::new(n.clone()), Box::new(E::Const(256))),
            E::Const(1),
            E::Const(1),
        ],
        block: [E::Const(256), E::Const(1), E::Const(1)],
        dynamic_smem_bytes: E::Const(0),
        constraints: vec![],
        tensor_maps: vec![],
        register_sharing: None,
        cluster: None,
        matmul: None,
        persistent: None,
        auto_schedule: None,
        min_global_bytes: E::Mul(Box::new(E::Const(4)), Box::new(n)),
    }
}

/// `N` of a fault run: the request's, else 2^20.
pub fn elements(req: &RunRequest) -> i64 {
    req.sizes.get("N").copied().unwrap_or(1 << 20)
}

/// Runs a fault kernel as the engine runs any kernel (validated against `y = 0`), on the
/// device in `slot` (opened there when `None`).
pub fn run_on(
    slot: &mut Option<Device>,
    fault: Fault,
    req: &RunRequest,
    hooks: &mut dyn Hooks,
) -> Result<RunResult, RunError> {
    hooks.progress(Progress::Lowering);
    let n = elements(req);
    if !(1..=1 << 28).contains(&n) {
        return Err(RunError::new(
            Stage::Sizes,
            "a fault kernel needs 1 <= N <= 2^28",
        ));
    }
    let sizes: BTreeMap<String, i64> = [("N".to_string(), n)].into();
    let plan = plan(fault);
    let launch = plan
        .concretize(&sizes)
        .map_err(|e| RunError::new(Stage::Sizes, e.to_string()))?;
    let setup = Setup {
        index_type: IndexType::I32,
        index_reason: "fixed by the fault kernel".into(),
        launch,
    };
    let req = RunRequest {
        file: format!("fault/{}", kernel(fault)),
        source: String::new(),
        sizes,
        scalars: Default::default(),
        index: Some(IndexType::I32),
        copy_ceiling: false,
        peers: false,
        clock: false,
        generic: false,
        // A fault kernel's inputs are its own: no program inputs to fill.
        documents: Default::default(),
        ..req.clone()
    };
    let reference = engine::Reference {
        evaluate: Box::new(
            |sizes: &BTreeMap<String, i64>, _: &BTreeMap<String, Vec<f64>>| {
                Ok([("y".to_string(), vec![0.0; sizes["N"] as usize])].into())
            },
        ),
        tolerances: crate::validate::Tolerances::of_dtypes([("y", DType::F32)]),
    };
    engine::execute_on(slot, &req, cuda(fault), &plan, &setup, &reference, hooks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_concretize() {
        for f in [Fault::Deadlock, Fault::IllegalAddress, Fault::NvrtcError] {
            let l = plan(f)
                .concretize(&[("N".to_string(), 1000)].into())
                .unwrap();
            assert_eq!(l.grid, [4, 1, 1]);
        }
    }

    #[test]
    fn the_good_faults_compile_and_the_bad_one_does_not() {
        if crate::not_run::nvrtc_missing("fault kernels through NVRTC") {
            return;
        }
        for f in [Fault::Deadlock, Fault::IllegalAddress] {
            let c = crate::nvrtc::compile(cuda(f), kernel(f)).unwrap();
            assert!(c.warnings.is_empty(), "{f:?}: {}", c.log);
        }
        assert!(crate::nvrtc::compile(NVRTC_ERROR, "bad").is_err());
    }
}

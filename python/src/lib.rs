//! `hopfuse._native`: the Rust side of the Python package. It takes program text and sizes
//! and gives what `hopfuse/__init__.py` needs to call a kernel on torch tensors:
//!
//! - [`Program`]: a program lowered once without sizes, for its signature (the fusion's
//!   inputs, outputs and scalars with their dtypes and shapes as size expressions), or a
//!   `CompileError` with every problem at its line and column; for a fusion no scheduler takes
//!   whole, its segments (each a program of its own, run in order by `hopfuse/__init__.py`);
//! - [`Program::specialize`]: a [`Specialization`] for concrete sizes (index type, aligned
//!   vector accesses, the plan's constraints and TMA boxes checked: a `ValueError` naming the
//!   rule), with every tensor parameter's shape for the caller to allocate;
//! - [`Specialization::launcher`]: a [`Launcher`] for one device, what a cached call of the
//!   Python package launches through: the kernel's arguments built once ([`PlanArgs`]), NVRTC
//!   once per CUDA source ([`hopfuse_launch::cache`], in memory and on disk), the CUBIN loaded
//!   once into the device's primary context (torch's); each launch writes the tensors'
//!   addresses and the scalars, encodes a TMA tensor map whose address changed, and makes one
//!   `cuLaunchKernel` on the caller's stream. [`Specialization::launch`] does the same once.
//!
//! Tensors stay torch's: this module sees only device addresses, so it imports no torch.

use hopfuse::plan::{Param, SizeExpr, TensorRole};
use hopfuse::{CompileOptions, DType, IndexType, LaunchPlan};
use hopfuse_launch::args::PlanArgs;
use hopfuse_launch::driver::{use_device, Kernel};
use hopfuse_launch::specialize::{compile_for_sizes, PrepareError, Setup};
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

create_exception!(
    _native,
    MisalignedError,
    PyValueError,
    "A device address given to a launch is not a multiple of 16 bytes (the kernels' vector \
     accesses and TMA need it)."
);

create_exception!(
    _native,
    CompileError,
    PyValueError,
    "The program text does not compile (every problem with its line and column)."
);

/// A size expression as nested tuples: `("const", 4)`, `("sym", "M")`, `("add", a, b)`,
/// `("mul", a, b)`, `("ceil_div", a, b)`, `("max", a, b)`.
fn size_expr<'py>(py: Python<'py>, e: &SizeExpr) -> PyResult<Bound<'py, PyTuple>> {
    let pair = |tag: &str, a: &SizeExpr, b: &SizeExpr| -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(
            py,
            [
                tag.into_pyobject(py)?.into_any(),
                size_expr(py, a)?.into_any(),
                size_expr(py, b)?.into_any(),
            ],
        )
    };
    match e {
        SizeExpr::Const(c) => ("const", *c).into_pyobject(py),
        SizeExpr::Sym(s) => ("sym", s.as_str()).into_pyobject(py),
        SizeExpr::Add(a, b) => pair("add", a, b),
        SizeExpr::Mul(a, b) => pair("mul", a, b),
        SizeExpr::CeilDiv(a, b) => pair("ceil_div", a, b),
        SizeExpr::Max(a, b) => pair("max", a, b),
    }
}

fn role_name(role: TensorRole) -> &'static str {
    match role {
        TensorRole::Input => "input",
        TensorRole::Output => "output",
        TensorRole::Scratch => "scratch",
        TensorRole::Workspace => "workspace",
    }
}

/// A program lowered once without sizes: its signature.
#[pyclass(frozen, module = "hopfuse._native")]
struct Program {
    source: String,
    /// The kernel's name, or a fusion run as several kernels: the fusion's.
    name: String,
    /// The kernel's plan, or each segment kernel's in the order they run.
    plans: Vec<LaunchPlan>,
    /// The fusion's outputs by name, in declaration order.
    fusion_outputs: Vec<String>,
    /// The fusion's inputs in declaration order: name, dtype, declared shape (empty for a
    /// scalar).
    inputs: Vec<(String, DType, Vec<SizeExpr>)>,
    /// A fusion no scheduler takes whole, split into kernels run in order
    /// ([`hopfuse::segment`], decided once for the program: for its `// bench:` sizes when it
    /// has them): why, and each segment's program.
    segmentation: Option<hopfuse::segment::Segmentation>,
}

#[pymethods]
impl Program {
    /// Lowers `source` (a fusion and its schedule) once to learn its signature.
    #[new]
    fn new(py: Python<'_>, source: String) -> PyResult<Program> {
        // Split when no scheduler takes the fusion whole (decided for its `// bench:` sizes,
        // when it has them), as the runner runs it.
        let lowered = py.detach(|| hopfuse::compile_program(&source, &CompileOptions::default()));
        let compiled =
            lowered.map_err(|d| CompileError::new_err(d.render(&source, "<program>")))?;
        let (name, plans, f, segmentation) = match compiled {
            hopfuse::Compiled::One { compilation, .. } => {
                let c = *compilation;
                (c.plan.kernel_name.clone(), vec![c.plan], c.fusion, None)
            }
            hopfuse::Compiled::Segmented(s) => {
                let s = *s;
                let plans = s.kernels.into_iter().map(|c| c.plan).collect();
                (s.plan.fusion.clone(), plans, s.fusion, Some(s.segmentation))
            }
        };
        let inputs = f
            .inputs
            .iter()
            .map(|&t| {
                let tensor = &f.tensors[t];
                (tensor.name.clone(), tensor.dtype, f.root_shape(t))
            })
            .collect();
        let fusion_outputs = f
            .outputs
            .iter()
            .map(|&t| f.tensors[t].name.clone())
            .collect();
        Ok(Program {
            source,
            name,
            plans,
            fusion_outputs,
            inputs,
            segmentation,
        })
    }

    /// For a fusion run as several kernels: `(reason, [(program, reads, writes), ...])`, why it
    /// is split and each segment's program (without a schedule: its automatic one) with the
    /// tensors it reads and writes by the names the program gives them, in the order they run.
    /// None for a program of one kernel.
    #[getter]
    fn segments(&self) -> Option<SegmentList> {
        self.segmentation.as_ref().map(|s| {
            (
                s.reason.clone(),
                s.segments
                    .iter()
                    .map(|g| (g.source.clone(), g.reads.clone(), g.writes.clone()))
                    .collect(),
            )
        })
    }

    /// The kernel's name (of a fusion run as several kernels: the fusion's).
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The size symbols, in order of first appearance (in the kernels in the order they run).
    #[getter]
    fn symbols(&self) -> Vec<String> {
        let mut symbols: Vec<String> = Vec::new();
        for s in self.plans.iter().flat_map(|p| &p.symbols) {
            if !symbols.contains(s) {
                symbols.push(s.clone());
            }
        }
        symbols
    }

    /// The fusion's inputs in declaration order: `(name, dtype, shape)`, the shape a list of
    /// size expressions (empty for a scalar input).
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.inputs
            .iter()
            .map(|(name, dtype, shape)| {
                let dims = shape
                    .iter()
                    .map(|e| size_expr(py, e))
                    .collect::<PyResult<Vec<_>>>()?;
                (name.as_str(), dtype.name(), dims).into_pyobject(py)
            })
            .collect()
    }

    /// The fusion's outputs in declaration order: `(name, dtype, shape)` as the kernel that
    /// writes it writes it (reduction axes removed, broadcast axes 1).
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let written: Vec<(&str, DType, &[SizeExpr])> = self
            .plans
            .iter()
            .flat_map(|p| p.tensors())
            .filter(|(name, _, role, _)| {
                *role == TensorRole::Output && self.fusion_outputs.iter().any(|o| o == name)
            })
            .map(|(name, dtype, _, shape)| (name, dtype, shape))
            .collect();
        self.fusion_outputs
            .iter()
            .filter_map(|o| written.iter().find(|(name, ..)| name == o))
            .map(|(name, dtype, shape)| {
                let dims = shape
                    .iter()
                    .map(|e| size_expr(py, e))
                    .collect::<PyResult<Vec<_>>>()?;
                (*name, dtype.name(), dims).into_pyobject(py)
            })
            .collect()
    }

    /// The scalar parameters the kernels take: `(name, dtype, value)`, the value the program
    /// gives it (`input eps: f32 = 1e-6`) or None; each once.
    #[getter]
    fn scalars(&self) -> Vec<(String, &'static str, Option<f64>)> {
        let mut scalars: Vec<(String, &'static str, Option<f64>)> = Vec::new();
        for p in self.plans.iter().flat_map(|p| &p.params) {
            if let Param::Scalar { name, dtype, value } = p {
                if scalars.iter().all(|(n, ..)| n != name) {
                    scalars.push((name.clone(), dtype.name(), *value));
                }
            }
        }
        scalars
    }

    /// The program text.
    #[getter]
    fn source(&self) -> &str {
        &self.source
    }

    /// The PyTorch twin of the fusion, as the playground shows it: `(source, function)`, the
    /// source of a Python module defining `function` (the fusion's inputs in, its outputs out).
    fn torch_twin(&self) -> PyResult<(String, String)> {
        hopfuse::torch_twin(&self.source)
            .map(|t| (t.source, t.function))
            .map_err(|d| CompileError::new_err(d.render(&self.source, "<program>")))
    }

    /// The program compiled for `sizes` (a dict of every size symbol), `index` ("i32" or
    /// "i64") forced or, by default, the one the sizes need.
    #[pyo3(signature = (sizes, index=None))]
    fn specialize(
        &self,
        py: Python<'_>,
        sizes: BTreeMap<String, i64>,
        index: Option<&str>,
    ) -> PyResult<Specialization> {
        let index = match index {
            None => None,
            Some("i32") => Some(IndexType::I32),
            Some("i64") => Some(IndexType::I64),
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "index must be \"i32\" or \"i64\", not {other:?}"
                )))
            }
        };
        let source = &self.source;
        // Generic over the sizes, as the package has always compiled (its cache is keyed by
        // the sizes, so a specialised kernel would also be correct: not switched yet).
        let compiled = py.detach(|| compile_for_sizes(source, &sizes, index, false, false));
        let (compilation, setup) = compiled.map_err(|e| match e {
            PrepareError::Compile(d) => CompileError::new_err(d.render(source, "<program>")),
            PrepareError::Sizes(e) => PyValueError::new_err(format!("sizes {sizes:?}: {e}")),
        })?;
        Ok(Specialization {
            cuda: compilation.cuda,
            plan: compilation.plan,
            setup,
            sizes,
            kernels: Mutex::new(HashMap::new()),
            cubin: OnceLock::new(),
        })
    }
}

/// [`Program::segments`]: why, and each segment's program, reads and writes.
type SegmentList = (String, Vec<(String, Vec<String>, Vec<String>)>);

/// A tensor parameter as Python sees it: name, role, dtype, shape.
type TensorParam = (String, &'static str, &'static str, Vec<i64>);

/// A program compiled for one set of sizes.
#[pyclass(frozen, module = "hopfuse._native")]
struct Specialization {
    cuda: String,
    plan: LaunchPlan,
    setup: Setup,
    sizes: BTreeMap<String, i64>,
    cubin: OnceLock<Arc<[u8]>>,
    /// The kernel loaded into each device's primary context, by device ordinal.
    kernels: Mutex<HashMap<i32, Arc<Kernel>>>,
}

impl Specialization {
    fn cubin_now(&self, py: Python<'_>) -> PyResult<Arc<[u8]>> {
        if let Some(c) = self.cubin.get() {
            return Ok(c.clone());
        }
        let name = format!("{}.cu", self.plan.kernel_name);
        let cubin = py
            .detach(|| hopfuse_launch::cache::cubin(&self.cuda, &name))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(self.cubin.get_or_init(|| cubin).clone())
    }

    /// The arguments of a launch whose addresses are in [`Specialization::tensors`] order,
    /// with the scalars in `scalars` (the program's values for the others).
    fn plan_args(
        &self,
        pointers: usize,
        scalars: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<(PlanArgs, Vec<f64>)> {
        let identity: Vec<usize> = (0..self.plan.tensors().count()).collect();
        let args = PlanArgs::new(&self.plan, &self.sizes, &identity, pointers)
            .map_err(PyValueError::new_err)?;
        let values = args
            .scalar_values(&scalar_map(scalars)?)
            .map_err(PyValueError::new_err)?;
        Ok((args, values))
    }

    /// `count` launches with the arguments built once (see [`Specialization::launch`]); the
    /// host seconds the launches took.
    fn launches(
        &self,
        py: Python<'_>,
        device: i32,
        stream: u64,
        pointers: &[u64],
        scalars: Option<&Bound<'_, PyDict>>,
        count: u32,
    ) -> PyResult<f64> {
        let (mut args, values) = self.plan_args(pointers.len(), scalars)?;
        let kernel = self.kernel(py, device)?;
        let current = use_device(device).map_err(PyRuntimeError::new_err)?;
        let params = args
            .fill(pointers, &values)
            .map_err(PyValueError::new_err)?;
        let start = std::time::Instant::now();
        for _ in 0..count {
            kernel
                .launch(&current, &self.setup.launch, stream, params)
                .map_err(PyRuntimeError::new_err)?;
        }
        Ok(start.elapsed().as_secs_f64())
    }

    fn kernel(&self, py: Python<'_>, device: i32) -> PyResult<Arc<Kernel>> {
        if let Some(k) = self
            .kernels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&device)
        {
            return Ok(k.clone());
        }
        let cubin = self.cubin_now(py)?;
        let kernel = Kernel::load(device, &cubin, &self.plan.kernel_name)
            .map(Arc::new)
            .map_err(PyRuntimeError::new_err)?;
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        Ok(kernels.entry(device).or_insert(kernel).clone())
    }
}

#[pymethods]
impl Specialization {
    /// The CUDA source.
    #[getter]
    fn cuda(&self) -> &str {
        &self.cuda
    }

    /// The launch plan as JSON.
    #[getter]
    fn plan_json(&self) -> PyResult<String> {
        serde_json::to_string_pretty(&self.plan).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// "i32" or "i64", and why.
    #[getter]
    fn index_type(&self) -> (&'static str, &str) {
        let t = match self.setup.index_type {
            IndexType::I32 => "i32",
            IndexType::I64 => "i64",
        };
        (t, &self.setup.index_reason)
    }

    /// Grid, block and dynamic shared memory bytes of the launch.
    #[getter]
    fn launch_dims(&self) -> ([u32; 3], [u32; 3], u32) {
        let l = &self.setup.launch;
        (l.grid, l.block, l.dynamic_smem_bytes)
    }

    /// Every tensor parameter in the kernel's order: `(name, role, dtype, shape)` with role
    /// "input", "output", "scratch" (allocate, contents free) or "workspace" (allocate zeroed).
    #[getter]
    fn tensors(&self) -> PyResult<Vec<TensorParam>> {
        self.plan
            .tensors()
            .map(|(name, dtype, role, shape)| {
                let dims = shape
                    .iter()
                    .map(|e| e.eval(&self.sizes))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| PyValueError::new_err(format!("tensor `{name}`: {e}")))?;
                Ok((name.to_string(), role_name(role), dtype.name(), dims))
            })
            .collect()
    }

    /// The CUBIN (NVRTC runs here the first time, unless the disk cache has it).
    fn cubin<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let cubin = self.cubin_now(py)?;
        Ok(pyo3::types::PyBytes::new(py, &cubin))
    }

    /// Compiles (NVRTC) and loads the kernel on `device` without launching it.
    fn load(&self, py: Python<'_>, device: i32) -> PyResult<()> {
        self.kernel(py, device).map(|_| ())
    }

    /// A [`Launcher`] of this kernel on `device` whose launches give `addresses` device
    /// addresses, tensor parameter `t` ([`Specialization::tensors`] order) reading the one at
    /// `address_of[t]`. Nothing is compiled or loaded until its first launch.
    fn launcher(
        slf: Bound<'_, Self>,
        device: i32,
        address_of: Vec<usize>,
        addresses: usize,
    ) -> PyResult<Launcher> {
        let this = slf.get();
        let args = PlanArgs::new(&this.plan, &this.sizes, &address_of, addresses)
            .map_err(PyValueError::new_err)?;
        Ok(Launcher {
            scalars: args.scalar_names().map(str::to_string).collect(),
            args: Mutex::new(args),
            spec: slf.unbind(),
            device,
            kernel: OnceLock::new(),
        })
    }

    /// Launches once on `stream` (a CUDA stream handle of device `device`): `pointers` holds
    /// the device address of every tensor parameter in [`Specialization::tensors`] order,
    /// `scalars` the value of every scalar parameter the program gives none.
    #[pyo3(signature = (device, stream, pointers, scalars=None))]
    fn launch(
        &self,
        py: Python<'_>,
        device: i32,
        stream: u64,
        pointers: Vec<u64>,
        scalars: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.launches(py, device, stream, &pointers, scalars, 1)
            .map(|_| ())
    }

    /// The baseline of the launch-overhead benchmark: the arguments built once, then `count`
    /// bare `cuLaunchKernel`s of this CUBIN on `stream`; returns the host seconds the launches
    /// took (enqueueing only: the caller synchronizes).
    #[pyo3(signature = (device, stream, pointers, count, scalars=None))]
    fn time_bare_launches(
        &self,
        py: Python<'_>,
        device: i32,
        stream: u64,
        pointers: Vec<u64>,
        count: u32,
        scalars: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<f64> {
        self.launches(py, device, stream, &pointers, scalars, count)
    }
}

/// One specialization's kernel on one device, as a cached call of the Python package launches
/// it: the arguments built once, the kernel compiled and loaded at the first launch.
#[pyclass(frozen, module = "hopfuse._native")]
struct Launcher {
    spec: Py<Specialization>,
    device: i32,
    /// The scalar parameters' names, in the order a launch takes their values.
    scalars: Vec<String>,
    args: Mutex<PlanArgs>,
    kernel: OnceLock<Arc<Kernel>>,
}

#[pymethods]
impl Launcher {
    /// The scalar parameters' names, in the order [`Launcher::launch`] takes their values.
    #[getter]
    fn scalars(&self) -> Vec<String> {
        self.scalars.clone()
    }

    /// Launches on `stream` (a CUDA stream handle of the launcher's device): `addresses` as
    /// many device addresses as the launcher was made for, `scalars` one value per scalar
    /// parameter ([`Launcher::scalars`] order). A misaligned address raises `MisalignedError`
    /// before anything is compiled or launched.
    fn launch(
        &self,
        py: Python<'_>,
        stream: u64,
        addresses: Vec<u64>,
        scalars: Vec<f64>,
    ) -> PyResult<()> {
        if let Some(i) = hopfuse_launch::args::first_misaligned(&addresses) {
            return Err(MisalignedError::new_err(format!(
                "device address {i} ({:#x}) is not a multiple of {} bytes",
                addresses[i],
                hopfuse_launch::args::ALIGNMENT
            )));
        }
        let spec = self.spec.get();
        let kernel = match self.kernel.get() {
            Some(k) => k,
            None => {
                let k = spec.kernel(py, self.device)?;
                self.kernel.get_or_init(|| k)
            }
        };
        let current = use_device(self.device).map_err(PyRuntimeError::new_err)?;
        let mut args = self.args.lock().unwrap_or_else(|e| e.into_inner());
        let params = args
            .fill(&addresses, &scalars)
            .map_err(PyValueError::new_err)?;
        // The driver copies the parameters at the call: the lock covers it.
        kernel
            .launch(&current, &spec.setup.launch, stream, params)
            .map_err(PyRuntimeError::new_err)
    }
}

fn scalar_map(scalars: Option<&Bound<'_, PyDict>>) -> PyResult<BTreeMap<String, f64>> {
    let mut values = BTreeMap::new();
    if let Some(scalars) = scalars {
        for (k, v) in scalars.iter() {
            values.insert(k.extract::<String>()?, v.extract::<f64>()?);
        }
    }
    Ok(values)
}

/// Whether libnvrtc (CUDA 13) and libcuda can be loaded: `(nvrtc, driver)`.
#[pyfunction]
fn available() -> (bool, bool) {
    (
        hopfuse_launch::nvrtc::available(),
        hopfuse_launch::driver::available(),
    )
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Program>()?;
    m.add_class::<Specialization>()?;
    m.add_class::<Launcher>()?;
    m.add_function(wrap_pyfunction!(available, m)?)?;
    m.add("CompileError", m.py().get_type::<CompileError>())?;
    m.add("MisalignedError", m.py().get_type::<MisalignedError>())?;
    Ok(())
}

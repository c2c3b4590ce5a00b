//! The native module `fencepost._core`: the simulator, the option registry,
//! the report schema and the wire codec for Python. Long calls release the
//! GIL. Errors cross as `ValueError(option, message)` for bad options, which
//! `fencepost` turns into its own exception types.

mod controller;
mod lab;
mod net;

use fencepost_link::Trace;
use fencepost_sim::events::JsonlWriter;
use fencepost_sim::{OneThread, Parallelism, Scenario, Simulation};
use fencepost_spec::options::{Command, Given};
use fencepost_spec::report::RunReport;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Runs one simulated scenario given as (option, value) pairs; returns the report as JSON.
/// With `events`, writes the per-packet event log there as JSON lines. With `parallel`, runs
/// on two threads where the run allows (`Simulation::parallel`: the same report).
#[pyfunction]
#[pyo3(signature = (options, events=None, parallel=false))]
fn simulate(py: Python<'_>, options: Vec<(String, String)>, events: Option<PathBuf>, parallel: bool) -> PyResult<String> {
    Ok(simulate_with_parallelism(py, options, events, parallel)?.0)
}

/// As `simulate` with `parallel`, saying how the run used two threads: returns the report as
/// JSON, the simulated seconds run apart, and why the run stayed on one thread throughout
/// (`None` when it split). With `events` it stays on one (the log's order is one thread's).
#[pyfunction]
#[pyo3(signature = (options, events=None))]
fn simulate_parallel(py: Python<'_>, options: Vec<(String, String)>, events: Option<PathBuf>) -> PyResult<(String, f64, Option<String>)> {
    let (report, parallelism) = simulate_with_parallelism(py, options, events, true)?;
    Ok((report, parallelism.apart.as_secs_f64(), parallelism.one_thread.map(|why| why.to_string())))
}

fn simulate_with_parallelism(py: Python<'_>, options: Vec<(String, String)>, events: Option<PathBuf>, parallel: bool) -> PyResult<(String, Parallelism)> {
    let _ = controller::take_error();
    let scenario = Scenario::from_options(options.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| PyValueError::new_err((e.option, e.message)))?;
    let ran = simulate_scenario(py, scenario, events, parallel)?;
    // A Python controller that raised ran on with its last window; the run's figures mean nothing.
    if let Some(error) = controller::take_error() {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(format!("the Python congestion controller failed: {error}")));
    }
    Ok(ran)
}

fn simulate_scenario(py: Python<'_>, scenario: Scenario, events: Option<PathBuf>, parallel: bool) -> PyResult<(String, Parallelism)> {
    let cancel = Arc::new(AtomicBool::new(false));
    let sim = Simulation::new(scenario.clone()).cancel_on(cancel.clone()).parallel(parallel);
    let Some(path) = events else {
        let (report, parallelism) = run_interruptible(py, &cancel, move || sim.run_with_parallelism())?;
        return Ok((report.to_json(), parallelism));
    };
    let writer = JsonlWriter::create(&path, "fencepost sim", serde_json::json!(scenario.options))
        .map_err(|e| PyValueError::new_err(("events".to_string(), format!("cannot write {}: {e}", path.display()))))?;
    let sim = sim.with_trace(Box::new(writer)).cancel_on(cancel.clone());
    let (report, recorded) = run_interruptible(py, &cancel, move || sim.run_traced())?;
    recorded.map_err(|e| PyOSError::new_err(format!("writing the event log {}: {e}", path.display())))?;
    let parallelism = Parallelism { apart: fencepost_proto::Duration::ZERO, one_thread: parallel.then_some(OneThread::EventsRecorded) };
    Ok((report.to_json(), parallelism))
}

/// Runs `job` on a helper thread with the GIL released, checking for Ctrl-C every
/// 100 ms; on Ctrl-C sets `cancel`, waits for the run to stop and raises KeyboardInterrupt.
fn run_interruptible<T: Send + 'static>(py: Python<'_>, cancel: &AtomicBool, job: impl FnOnce() -> T + Send + 'static) -> PyResult<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    // Shared with the GIL-free waits below, which need a `Sync` receiver.
    let rx = std::sync::Mutex::new(rx);
    let wait = |timeout: Option<std::time::Duration>| {
        let rx = rx.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match timeout {
            Some(t) => rx.recv_timeout(t),
            None => rx.recv().map_err(|_| std::sync::mpsc::RecvTimeoutError::Disconnected),
        }
    };
    std::thread::Builder::new()
        .name("fencepost-sim".into())
        .spawn(move || {
            let _ = tx.send(job());
        })
        .map_err(|e| PyOSError::new_err(format!("cannot start the simulation thread: {e}")))?;
    loop {
        match py.detach(|| wait(Some(std::time::Duration::from_millis(100)))) {
            Ok(result) => return Ok(result),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Err(interrupt) = py.check_signals() {
                    cancel.store(true, std::sync::atomic::Ordering::Relaxed);
                    let _ = py.detach(|| wait(None));
                    return Err(interrupt);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(PyOSError::new_err("the simulation thread failed"));
            }
        }
    }
}

/// A mahimahi trace as text: `constant` or `poisson` at `bits_per_second`, `duration_ms` long (poisson).
#[pyfunction]
#[pyo3(signature = (kind, bits_per_second, duration_ms=60_000, seed=1))]
fn generate_trace(kind: &str, bits_per_second: u64, duration_ms: u64, seed: u64) -> PyResult<String> {
    match kind {
        "constant" => Ok(Trace::constant(bits_per_second).to_text()),
        "poisson" => Ok(Trace::poisson(bits_per_second, duration_ms, seed).to_text()),
        other => Err(PyValueError::new_err(format!("{other:?} is not a trace kind; accepted: constant, poisson"))),
    }
}

fn command(name: &str) -> PyResult<Command> {
    Command::parse(name).ok_or_else(|| PyValueError::new_err(format!("{name:?} is not a command; accepted: sim, sweep, send, serve, echo-bench")))
}

/// Checks options for `command` without running anything: raises
/// `ValueError(option, message)` on the first bad one. For `sim` and `sweep`
/// returns the run's options with defaults filled in; for the others, the options
/// as given under their canonical names.
#[pyfunction]
fn check_options(command_name: &str, options: Vec<(String, String)>) -> PyResult<Vec<(String, String)>> {
    let pairs = options.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let err = |e: fencepost_spec::OptionError| PyValueError::new_err((e.option, e.message));
    match command(command_name)? {
        Command::Sim | Command::Sweep => Ok(Scenario::from_options(pairs).map_err(err)?.options.into_iter().collect()),
        tool => {
            fencepost_spec::tools::tool_options(tool, pairs.clone()).map_err(err)?;
            Ok(Given::parse(tool, pairs).map_err(err)?.pairs().to_vec())
        }
    }
}

/// One value through its unit parser: `rate` gives bit/s, `duration` microseconds,
/// `size` bytes. ValueError((option, message)) when it does not parse.
#[pyfunction]
fn parse_unit(kind: &str, option: &str, text: &str) -> PyResult<u64> {
    let parsed = match kind {
        "rate" => fencepost_spec::units::parse_rate(text),
        "duration" => fencepost_spec::units::parse_duration(text),
        "size" => fencepost_spec::units::parse_bytes(text),
        other => return Err(PyValueError::new_err(format!("{other:?} is not a unit kind; accepted: rate, duration, size"))),
    };
    parsed.map_err(|e| PyValueError::new_err((option.to_string(), e.0)))
}

/// Every option of every command, as JSON: a list of objects with name, scope,
/// kind, metavar, default, help, choices, commands, per_flow, per_direction,
/// repeatable and aliases.
#[pyfunction]
fn option_specs() -> String {
    serde_json::to_string(fencepost_spec::OPTIONS).expect("the registry serializes")
}

/// The report's fields as JSON: `{"flow": [...], "run": [...], "link": [...]}`,
/// each field with name, type, summarise and help.
#[pyfunction]
fn report_schema() -> String {
    fencepost_spec::report::schema().to_string()
}

/// The human summary of a report given as JSON (what `fencepost sim` prints).
#[pyfunction]
fn report_text(report: &str) -> PyResult<String> {
    let report = RunReport::from_json(report).map_err(|e| PyValueError::new_err(format!("not a fencepost report: {e}")))?;
    Ok(report.to_text())
}

/// Parses one datagram; returns the packet type's name, or raises ValueError naming what is wrong.
#[pyfunction]
fn decode_packet(data: &[u8]) -> PyResult<String> {
    use fencepost_proto::wire::Packet;
    match Packet::parse(data) {
        Ok(p) => Ok(format!("{:?}", p.packet_type()).to_lowercase()),
        Err(e) => Err(PyValueError::new_err(e.to_string())),
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_parallel, m)?)?;
    m.add_function(wrap_pyfunction!(check_options, m)?)?;
    m.add_function(wrap_pyfunction!(option_specs, m)?)?;
    m.add_function(wrap_pyfunction!(report_schema, m)?)?;
    m.add_function(wrap_pyfunction!(report_text, m)?)?;
    m.add_function(wrap_pyfunction!(decode_packet, m)?)?;
    m.add_function(wrap_pyfunction!(generate_trace, m)?)?;
    m.add_function(wrap_pyfunction!(parse_unit, m)?)?;
    m.add_function(wrap_pyfunction!(net::echo_bench, m)?)?;
    m.add_function(wrap_pyfunction!(net::keygen, m)?)?;
    m.add_function(wrap_pyfunction!(net::public_key, m)?)?;
    m.add_function(wrap_pyfunction!(controller::register_python_controller, m)?)?;
    m.add_class::<controller::PyAck>()?;
    m.add_class::<controller::PyLoss>()?;
    controller::register_file_controllers();
    m.add_class::<net::PyEndpoint>()?;
    m.add_class::<net::PyConnection>()?;
    m.add_class::<net::PyServer>()?;
    m.add_class::<net::PySender>()?;
    lab::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

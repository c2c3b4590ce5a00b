//! The lab's native calls. Each runs in a process of its own inside a network
//! namespace (`python -m fencepost._lab_agent`), until it is done or until the
//! process is told to stop (SIGTERM or SIGINT), and then returns its account.

use fencepost_lab::{emulator, offload, tcp};
use fencepost_spec::link::{link_configs, TraceCache};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The line a lab process writes to stderr once it is listening.
const READY: &str = "fencepost-lab: ready";

fn os_error(e: std::io::Error) -> PyErr {
    PyOSError::new_err(e.to_string())
}

/// Runs `job` on a helper thread with the GIL released. A signal that Python
/// turns into an exception (Ctrl-C, or SIGTERM where the caller maps it) sets
/// `stop`; the job then winds up and its result is still returned.
fn run_until_signal<T: Send + 'static>(py: Python<'_>, stop: Arc<AtomicBool>, job: impl FnOnce(Arc<AtomicBool>) -> T + Send + 'static) -> PyResult<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    let rx = std::sync::Mutex::new(rx);
    let flag = stop.clone();
    std::thread::Builder::new()
        .name("fencepost-lab".into())
        .spawn(move || {
            let _ = tx.send(job(flag));
        })
        .map_err(|e| PyOSError::new_err(format!("cannot start the lab thread: {e}")))?;
    loop {
        let got = py.detach(|| rx.lock().unwrap_or_else(|p| p.into_inner()).recv_timeout(Duration::from_millis(50)));
        match got {
            Ok(result) => return Ok(result),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if py.check_signals().is_err() {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Err(PyOSError::new_err("the lab thread failed")),
        }
    }
}

/// Emulates the link given by `options` (the simulator's link options) between
/// interfaces `up_in` and `down_in` until stopped; returns the emulator's report as JSON.
#[pyfunction]
#[pyo3(signature = (up_in, down_in, options, seed, log=None))]
fn lab_emulate(py: Python<'_>, up_in: String, down_in: String, options: Vec<(String, String)>, seed: u64, log: Option<String>) -> PyResult<String> {
    let get = |k: &str| options.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let (up, down) = link_configs(&get, None, &mut TraceCache::default()).map_err(|e| PyValueError::new_err((e.option, e.message)))?;
    let spec = emulator::EmulatorSpec { up_in, down_in, up, down, seed, log: log.map(Into::into), socket_buffer: 32 << 20 };
    let stop = Arc::new(AtomicBool::new(false));
    let report = run_until_signal(py, stop, move |stop| emulator::run(spec, &stop, || eprintln!("{READY}")))?.map_err(os_error)?;
    Ok(serde_json::to_string(&report).expect("the report serializes"))
}

/// Both directions of the link the simulator's link `options` describe, as JSON:
/// `{"up": {...}, "down": {...}}` with delay and jitter in microseconds, the loss
/// model, the bottleneck (`rate_bps`, or `trace` with its mean rate) and the queue limit.
#[pyfunction]
fn lab_link(options: Vec<(String, String)>) -> PyResult<String> {
    use fencepost_link::{Bandwidth, LinkConfig, LossModel, QueueLimit};
    let get = |k: &str| options.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let (up, down) = link_configs(&get, None, &mut TraceCache::default()).map_err(|e| PyValueError::new_err((e.option, e.message)))?;
    let describe = |c: &LinkConfig| {
        let loss = match c.loss {
            LossModel::None => serde_json::json!({"model": "none", "mean": 0.0}),
            LossModel::Bernoulli(p) => serde_json::json!({"model": "bernoulli", "p": p, "mean": p}),
            LossModel::GilbertElliott { p, r, loss_good, loss_bad } => {
                serde_json::json!({"model": "gilbert", "p": p, "r": r, "good": loss_good, "bad": loss_bad, "mean": c.loss.mean_loss()})
            }
        };
        let (rate, trace_mean) = match &c.bandwidth {
            Bandwidth::Unlimited => (None, None),
            Bandwidth::Rate(bps) => (Some(*bps), None),
            Bandwidth::Trace(t) => (None, Some(t.mean_rate_bps())),
        };
        let (queue_bytes, queue_packets) = match c.queue {
            QueueLimit::Unlimited => (None, None),
            QueueLimit::Bytes(b) => (Some(b), None),
            QueueLimit::Packets(p) => (None, Some(p)),
        };
        serde_json::json!({
            "delay_us": c.delay, "jitter_us": c.jitter, "jitter_dist": format!("{:?}", c.jitter_distribution).to_lowercase(),
            "jitter_corr": c.jitter_correlation, "keep_order": c.keep_order, "loss": loss, "dup": c.duplicate, "corrupt": c.corrupt,
            "loss_after_bottleneck": c.loss_position == fencepost_link::LossPosition::AfterBottleneck,
            "rate_bps": rate, "trace_mean_bps": trace_mean, "queue_bytes": queue_bytes, "queue_packets": queue_packets,
        })
    };
    Ok(serde_json::json!({"up": describe(&up), "down": describe(&down)}).to_string())
}

/// A value in the options' notation as a number, by the one unit parser:
/// `duration` in seconds, `bytes`, `rate` in bit/s, `probability` as a fraction.
/// Raises `ValueError(option, message)`.
#[pyfunction]
fn parse_quantity(option: &str, kind: &str, text: &str) -> PyResult<f64> {
    use fencepost_spec::units;
    let fail = |e: units::UnitError| PyValueError::new_err((option.to_string(), e.0));
    match kind {
        "duration" => units::parse_duration(text).map(|us| us as f64 / 1e6).map_err(fail),
        "bytes" => units::parse_bytes(text).map(|b| b as f64).map_err(fail),
        "rate" => units::parse_rate(text).map(|b| b as f64).map_err(fail),
        "probability" => units::parse_probability(text).map_err(fail),
        other => Err(PyValueError::new_err((option.to_string(), format!("{other:?} is not a kind; accepted: duration, bytes, rate, probability")))),
    }
}

/// Turns segmentation, aggregation and checksum offloads off on `iface` inside network namespace `netns`.
#[pyfunction]
fn lab_offloads_off(py: Python<'_>, netns: String, iface: String) -> PyResult<()> {
    py.detach(move || offload::in_netns(&netns, move || offload::offloads_off(&iface))).map_err(os_error)
}

fn socket_addr(host: &str, port: u16) -> PyResult<SocketAddr> {
    let ip = host.parse().map_err(|_| PyValueError::new_err(format!("{host:?} is not an IP address")))?;
    Ok(SocketAddr::new(ip, port))
}

/// Kernel TCP bulk sender: `bytes` or, when `None`, for `seconds`; returns its report as JSON.
#[pyfunction]
#[pyo3(signature = (host, port, cc, bytes, seconds, sample_ms=10.0, connect_timeout_s=10.0, drain_timeout_s=30.0))]
#[allow(clippy::too_many_arguments)]
fn lab_tcp_send(py: Python<'_>, host: &str, port: u16, cc: String, bytes: Option<u64>, seconds: f64, sample_ms: f64, connect_timeout_s: f64, drain_timeout_s: f64) -> PyResult<String> {
    let spec = tcp::TcpSendSpec {
        target: socket_addr(host, port)?,
        cc,
        bytes,
        duration: crate::net::seconds("seconds", seconds)?,
        sample_every: crate::net::seconds("sample_ms", sample_ms.max(1.0) / 1000.0)?,
        connect_timeout: crate::net::seconds("connect_timeout_s", connect_timeout_s.max(0.1))?,
        drain_timeout: crate::net::seconds("drain_timeout_s", drain_timeout_s.max(0.1))?,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let report = run_until_signal(py, stop, move |stop| tcp::send(&spec, &stop))?.map_err(os_error)?;
    Ok(serde_json::to_string(&report).expect("the report serializes"))
}

/// Kernel TCP sink on `host:port` until stopped; prints one JSON line per finished connection.
#[pyfunction]
fn lab_tcp_sink(py: Python<'_>, host: &str, port: u16) -> PyResult<()> {
    let listener = TcpListener::bind(socket_addr(host, port)?).map_err(|e| PyOSError::new_err(format!("listening on {host}:{port}: {e}")))?;
    eprintln!("{READY}");
    let stop = Arc::new(AtomicBool::new(false));
    let print = |r: tcp::TcpSinkReport| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", serde_json::to_string(&r).expect("the report serializes"));
        let _ = out.flush();
    };
    run_until_signal(py, stop, move |stop| tcp::sink(listener, &stop, print))?.map_err(os_error)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(lab_emulate, m)?)?;
    m.add_function(wrap_pyfunction!(lab_offloads_off, m)?)?;
    m.add_function(wrap_pyfunction!(lab_link, m)?)?;
    m.add_function(wrap_pyfunction!(parse_quantity, m)?)?;
    m.add_function(wrap_pyfunction!(lab_tcp_send, m)?)?;
    m.add_function(wrap_pyfunction!(lab_tcp_sink, m)?)?;
    Ok(())
}

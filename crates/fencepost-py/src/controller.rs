//! Congestion controllers written in Python. A Python object with a `window`
//! (packets that may be in flight), an optional `pacing_rate` (bytes per second)
//! and `on_ack(ack)`, `on_loss(loss)`, `on_timeout()` methods drives a
//! connection through the core's controller seam: the Rust side keeps the
//! per-packet bookkeeping and calls Python once per ack, per loss episode and
//! per timeout, holding the GIL only for the call.
//!
//! A Python exception stops the calls into that controller (its window stays as
//! it was); the first one is kept and [`take_error`] hands it to the run that
//! must report it.

use fencepost_proto::congestion::Pacer;
use fencepost_proto::{AckBatch, Controller, ControllerConfig, ControllerFactory, Instant, RttEstimator, SentPacket};
use fencepost_spec::units::UnitError;
use pyo3::prelude::*;
use pyo3::types::PyAnyMethods;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The first error a Python controller raised since the last [`take_error`].
static ERROR: Mutex<Option<String>> = Mutex::new(None);

fn record_error(py: Python<'_>, context: &str, err: PyErr) {
    let mut slot = ERROR.lock().unwrap_or_else(|p| p.into_inner());
    if slot.is_none() {
        let traceback = err.traceback(py).and_then(|t| t.format().ok()).unwrap_or_default();
        *slot = Some(format!("{context}: {}\n{traceback}", err.value(py)));
    }
}

/// Runs `f` with the GIL, or not at all while the interpreter shuts down (a connection
/// can outlive the program that made it; waiting for the GIL then would never end).
fn python<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    Python::try_attach(f)
}

pub fn take_error() -> Option<String> {
    ERROR.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// What one ack brought, as the Python controller sees it.
#[pyclass(name = "Ack", module = "fencepost._core", frozen, get_all)]
pub struct PyAck {
    /// Seconds since the connection's clock started.
    time: f64,
    /// Bytes (whole datagrams) this ack newly acknowledged that were in flight.
    bytes: u64,
    /// Of those, bytes of packets sent after the latest loss or timeout: what Reno-style growth counts.
    new_bytes: u64,
    /// Packets newly acknowledged (in flight).
    packets: u64,
    /// Bytes lost while this ack was processed.
    lost_bytes: u64,
    /// Bytes in flight after the ack.
    in_flight: u64,
    /// The latest RTT sample, the smoothed RTT and the smallest seen, in seconds.
    rtt: f64,
    smoothed_rtt: f64,
    min_rtt: f64,
    /// The delivery-rate sample of this ack in bytes per second, if it gave one.
    delivery_rate: Option<f64>,
    /// The sample was taken while the application, not the window, limited sending.
    rate_app_limited: bool,
    /// The application limits sending right now.
    app_limited: bool,
    /// Bytes of one full datagram: windows are counted in these.
    mss: u64,
}

/// A loss episode (reported once per round trip of losses), or a retransmission timeout.
#[pyclass(name = "Loss", module = "fencepost._core", frozen, get_all)]
pub struct PyLoss {
    time: f64,
    /// When the first lost packet of the episode left.
    sent_time: f64,
    lost_bytes: u64,
    /// Bytes in flight as of the latest send or ack (RFC 5681's FlightSize).
    in_flight: u64,
    mss: u64,
}

/// Builds a Python controller per connection by calling `make()`.
pub struct PyFactory {
    make: Py<PyAny>,
    label: String,
}

impl std::fmt::Debug for PyFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PyFactory({})", self.label)
    }
}

impl ControllerFactory for PyFactory {
    fn build(&self, mss: u64) -> Box<dyn Controller> {
        let obj = python(|py| match self.make.call0(py) {
            Ok(obj) => {
                let _ = obj.bind(py).setattr("mss", mss);
                Some(obj)
            }
            Err(e) => {
                record_error(py, &format!("creating controller {}", self.label), e);
                None
            }
        })
        .flatten();
        let mut controller = PyController { obj, mss, window: 10 * mss, wants_every_ack: true, pacer: None, recovery_start: None, flight: 0, acked: 0, new_bytes: 0, packets: 0, lost_before: 0, lost: 0 };
        controller.read_window();
        Box::new(controller)
    }
    fn name(&self) -> &str {
        "python"
    }
    fn describe(&self) -> String {
        self.label.clone()
    }
}

#[derive(Debug)]
struct PyController {
    /// `None` once it raised: the window stays where it was.
    obj: Option<Py<PyAny>>,
    mss: u64,
    window: u64,
    /// The object's `wants_every_ack`, read with the window (see `Controller::wants_every_ack`).
    wants_every_ack: bool,
    pacer: Option<Pacer>,
    recovery_start: Option<Instant>,
    flight: u64,
    acked: u64,
    new_bytes: u64,
    packets: u64,
    lost_before: u64,
    lost: u64,
}

impl PyController {
    /// Calls `method(arg)`, then reads back `window`, `pacing_rate` and `wants_every_ack`.
    fn call(&mut self, method: &str, arg: Option<Py<PyAny>>) {
        let Some(obj) = &self.obj else { return };
        let failed = python(|py| {
            let bound = obj.bind(py);
            let result = match arg {
                Some(a) => bound.call_method1(method, (a,)),
                None => bound.call_method0(method),
            };
            match result {
                Ok(_) => false,
                Err(e) => {
                    record_error(py, &format!("controller.{method}"), e);
                    true
                }
            }
        })
        .unwrap_or(true);
        if failed {
            self.obj = None;
        } else {
            self.read_window();
        }
    }

    fn read_window(&mut self) {
        let Some(obj) = &self.obj else { return };
        let mss = self.mss;
        let Some(read) = python(|py| -> PyResult<(f64, Option<f64>, bool)> {
            let bound = obj.bind(py);
            let window: f64 = bound.getattr("window")?.extract()?;
            let rate: Option<f64> = bound.getattr("pacing_rate")?.extract()?;
            let wants_every_ack = bound.getattr("wants_every_ack")?.is_truthy()?;
            Ok((window, rate, wants_every_ack))
        }) else {
            self.obj = None;
            return;
        };
        match read {
            Ok((window, rate, wants_every_ack)) => {
                self.wants_every_ack = wants_every_ack;
                if !window.is_finite() || window < 0.0 {
                    python(|py| record_error(py, "controller.window", pyo3::exceptions::PyValueError::new_err(format!("{window} is not a number of packets (0 or more)"))));
                    self.obj = None;
                    return;
                }
                self.window = (window * mss as f64) as u64;
                match rate.filter(|r| r.is_finite() && *r > 0.0) {
                    Some(r) => match &mut self.pacer {
                        Some(p) => p.set_rate(r as u64),
                        None => self.pacer = Some(Pacer::new(r as u64, 10 * mss)),
                    },
                    None => self.pacer = None,
                }
            }
            Err(e) => {
                python(|py| record_error(py, "reading controller.window, controller.pacing_rate and controller.wants_every_ack", e));
                self.obj = None;
            }
        }
    }
}

impl PyController {
    /// A reduction starts: what this ack acknowledged was sent before it, so it is not new.
    fn report_loss(&mut self, method: &str, now: Instant, sent: Instant, lost_bytes: u64) {
        self.recovery_start = Some(now);
        self.new_bytes = 0;
        if self.obj.is_none() {
            return;
        }
        let loss = PyLoss { time: now.as_secs_f64(), sent_time: sent.as_secs_f64(), lost_bytes, in_flight: self.flight, mss: self.mss };
        if let Some(Ok(arg)) = python(|py| Py::new(py, loss).map(|l| l.into_any())) {
            self.call(method, Some(arg));
        }
    }
}

impl Controller for PyController {
    fn on_sent(&mut self, now: Instant, packet: &SentPacket, bytes_in_flight: u64) -> u64 {
        if let Some(p) = &mut self.pacer {
            p.on_sent(now, packet.bytes);
        }
        self.flight = bytes_in_flight;
        0
    }

    fn on_ack(&mut self, _now: Instant, packet: &SentPacket, _rtt: &RttEstimator) {
        self.acked += packet.bytes;
        self.packets += 1;
        if self.recovery_start.is_none_or(|start| packet.sent > start) {
            self.new_bytes += packet.bytes;
        }
    }

    fn on_packet_lost(&mut self, _now: Instant, packet: &SentPacket) {
        self.lost += packet.bytes;
    }

    fn on_ack_batch(&mut self, now: Instant, batch: &AckBatch, rtt: &RttEstimator) {
        self.flight = batch.bytes_in_flight;
        let ack = PyAck {
            time: now.as_secs_f64(),
            bytes: std::mem::take(&mut self.acked),
            new_bytes: std::mem::take(&mut self.new_bytes),
            packets: std::mem::take(&mut self.packets),
            lost_bytes: self.lost - std::mem::replace(&mut self.lost_before, self.lost),
            in_flight: batch.bytes_in_flight,
            rtt: rtt.latest().as_secs_f64(),
            smoothed_rtt: rtt.get().as_secs_f64(),
            min_rtt: rtt.min().as_secs_f64(),
            delivery_rate: batch.rate_sample.map(|s| s.delivery_rate),
            rate_app_limited: batch.rate_sample.is_some_and(|s| s.is_app_limited),
            app_limited: batch.app_limited,
            mss: self.mss,
        };
        if self.obj.is_none() {
            return;
        }
        match python(|py| Py::new(py, ack).map(|a| a.into_any())) {
            Some(Ok(a)) => self.call("on_ack", Some(a)),
            Some(Err(e)) => {
                python(|py| record_error(py, "controller.on_ack", e));
            }
            None => self.obj = None,
        }
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, lost_bytes: u64) {
        self.report_loss("on_loss", now, sent, lost_bytes);
    }

    fn on_retransmission_timeout(&mut self, now: Instant) {
        self.report_loss("on_timeout", now, now, 0);
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn wants_every_ack(&self) -> bool {
        self.wants_every_ack
    }

    fn earliest_departure_time(&self) -> Option<Instant> {
        self.pacer.as_ref().and_then(Pacer::earliest_departure_time)
    }

    fn name(&self) -> &str {
        "python"
    }
}

static NEXT_NAME: AtomicU64 = AtomicU64::new(1);

/// Makes `make` (a zero-argument callable returning a controller object) usable as
/// `--cc NAME`; returns the name. `label` is how reports show it.
#[pyfunction]
pub fn register_python_controller(make: Py<PyAny>, label: String) -> PyResult<String> {
    let name = format!("python-{}", NEXT_NAME.fetch_add(1, Ordering::Relaxed));
    let factory = Arc::new(PyFactory { make, label });
    fencepost_spec::register_controller(&name, Arc::new(move |params: &str| {
        if !params.is_empty() {
            return Err(UnitError("a controller given as a Python object takes no parameters".into()));
        }
        Ok(ControllerConfig::Custom(factory.clone()))
    }))
    .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.0))?;
    Ok(name)
}

/// `--cc python:FILE:CLASS`: the class named CLASS in the Python file FILE, one instance per connection.
pub fn register_file_controllers() {
    let _ = fencepost_spec::register_controller("python", Arc::new(|params: &str| {
        let Some((file, class)) = params.rsplit_once(':') else {
            return Err(UnitError("expected python:FILE:CLASS, like python:examples/controllers.py:Tahoe".into()));
        };
        let loaded = python(|py| -> Result<Py<PyAny>, String> {
            let load = || -> PyResult<Py<PyAny>> {
                let loader = py.import("fencepost.controller")?.getattr("load_class")?;
                Ok(loader.call1((file, class))?.unbind())
            };
            load().map_err(|e| e.value(py).to_string())
        })
        .unwrap_or_else(|| Err("the Python interpreter is shutting down".into()));
        match loaded {
            Ok(make) => Ok(ControllerConfig::Custom(Arc::new(PyFactory { make, label: format!("python:{file}:{class}") }))),
            Err(e) => Err(UnitError(format!("python:{file}:{class}: {e}"))),
        }
    }));
}

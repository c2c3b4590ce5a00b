//! The native module `fencepost._core`: the simulator and the wire codec for
//! Python. Long calls release the GIL. Errors cross as `ValueError(option, message)`
//! for bad options, which `fencepost` turns into its own exception types.

use fencepost_sim::Scenario;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Runs one simulated scenario given as (option, value) pairs; returns the report as JSON.
#[pyfunction]
fn simulate(py: Python<'_>, options: Vec<(String, String)>) -> PyResult<String> {
    let scenario = Scenario::from_options(options.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| PyValueError::new_err((e.option, e.message)))?;
    let report = py.detach(move || fencepost_sim::run(scenario));
    Ok(report.to_json())
}

/// Checks options without running anything: raises `ValueError(option, message)` on the first bad one.
#[pyfunction]
fn check_options(options: Vec<(String, String)>) -> PyResult<Vec<(String, String)>> {
    let scenario = Scenario::from_options(options.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| PyValueError::new_err((e.option, e.message)))?;
    Ok(scenario.options.into_iter().collect())
}

/// The option names a scenario accepts, with their defaults ("" = none).
#[pyfunction]
fn scenario_options() -> Vec<(&'static str, &'static str)> {
    fencepost_sim::scenario::OPTIONS.to_vec()
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
    m.add_function(wrap_pyfunction!(check_options, m)?)?;
    m.add_function(wrap_pyfunction!(scenario_options, m)?)?;
    m.add_function(wrap_pyfunction!(decode_packet, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

//! Real-network endpoints for Python. Every blocking call runs on a shared tokio
//! runtime with the GIL released, waking every 100 ms to let Ctrl-C through.

use fencepost_net::tools::{self, Amount};
use fencepost_net::{Connection, Endpoint, EndpointConfig, NetError};
use fencepost_spec::options::Command;
use fencepost_spec::tools::{tool_options, transport_from_options, ToolOptions};
use pyo3::exceptions::{PyConnectionError, PyConnectionRefusedError, PyOSError, PyOverflowError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::mpsc;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<&'static Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        // Lives for the whole process: blocking calls and asyncio awaitables share it.
        let rt: &'static Runtime = Box::leak(Box::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("fencepost-net")
                .enable_all()
                .build()
                .expect("a tokio runtime starts"),
        ));
        let _ = pyo3_async_runtimes::tokio::init_with_runtime(rt);
        rt
    })
}

const SLICE: Duration = Duration::from_millis(100);

/// A duration from Python seconds, as `socket.settimeout` takes one: NaN and negative
/// numbers are a ValueError, numbers too large for the clock an OverflowError.
pub(crate) fn seconds(what: &str, t: f64) -> PyResult<Duration> {
    if t.is_nan() {
        return Err(PyValueError::new_err(format!("{what}: NaN is not a number of seconds")));
    }
    if t < 0.0 {
        return Err(PyValueError::new_err(format!("{what}: {t} is negative; give None or a number of seconds >= 0")));
    }
    Duration::try_from_secs_f64(t).map_err(|_| PyOverflowError::new_err(format!("{what}: {t} seconds is too large (give None to wait without limit)")))
}

/// Bytes one `recv` reads at most, whatever it is asked for: like a socket, it may return fewer.
const MAX_RECV: usize = 4 << 20;

/// Runs `future` on the runtime until it finishes, `timeout` passes (TimeoutError)
/// or Ctrl-C (KeyboardInterrupt). The GIL is released while waiting.
fn block_on<F>(py: Python<'_>, future: F, timeout: Option<f64>, what: &str) -> PyResult<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let limit = timeout.map(|t| seconds("timeout", t)).transpose()?;
    let mut task = runtime().spawn(future);
    let started = Instant::now();
    loop {
        let wait = limit.map_or(SLICE, |l| l.saturating_sub(started.elapsed()).min(SLICE));
        let done = py.detach(|| runtime().block_on(async { tokio::time::timeout(wait, &mut task).await }));
        match done {
            Ok(Ok(output)) => return Ok(output),
            Ok(Err(join_error)) => return Err(PyOSError::new_err(format!("{what} failed: {join_error}"))),
            Err(_) => {}
        }
        if let Err(interrupt) = py.check_signals() {
            task.abort();
            return Err(interrupt);
        }
        if limit.is_some_and(|l| started.elapsed() >= l) {
            task.abort();
            return Err(PyTimeoutError::new_err(format!("{what} timed out after {:.3} s", limit.unwrap_or_default().as_secs_f64())));
        }
    }
}

fn net_error(e: NetError) -> PyErr {
    match &e {
        NetError::ConnectTimeout { .. } => PyTimeoutError::new_err(e.to_string()),
        NetError::ConnectionLost { error: fencepost_proto::ConnectionError::Unreachable(_), .. } => PyConnectionRefusedError::new_err(e.to_string()),
        NetError::ConnectionLost { .. } | NetError::EndpointClosed(_) => PyConnectionError::new_err(e.to_string()),
        NetError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => PyTimeoutError::new_err(e.to_string()),
        NetError::Io(io) if matches!(io.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::NotConnected) => {
            PyConnectionError::new_err(e.to_string())
        }
        _ => PyOSError::new_err(e.to_string()),
    }
}

fn io_error(e: std::io::Error) -> PyErr {
    match e.get_ref().and_then(|inner| inner.downcast_ref::<NetError>()) {
        Some(_) => {
            let message = e.to_string();
            match e.kind() {
                std::io::ErrorKind::TimedOut => PyTimeoutError::new_err(message),
                _ => PyConnectionError::new_err(message),
            }
        }
        None => match e.kind() {
            std::io::ErrorKind::TimedOut => PyTimeoutError::new_err(e.to_string()),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::NotConnected => {
                PyConnectionError::new_err(e.to_string())
            }
            _ => PyOSError::new_err(e.to_string()),
        },
    }
}

fn resolve(host: &str, port: u16) -> PyResult<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| PyOSError::new_err(format!("cannot resolve {host}:{port}: {e}")))?
        .next()
        .ok_or_else(|| PyOSError::new_err(format!("{host}:{port} resolves to no address")))
}

fn parse_tool(command: Command, options: &[(String, String)]) -> PyResult<ToolOptions> {
    tool_options(command, options.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(|e| PyValueError::new_err((e.option, e.message)))
}

fn tool_endpoint(server: bool, tool: &ToolOptions) -> EndpointConfig {
    let mut config = if server { EndpointConfig::server(tool.transport.clone()) } else { EndpointConfig::client(tool.transport.clone()) };
    config.connect_timeout = Duration::from_micros(tool.connect_timeout.total_micros());
    if tool.driver_on_runtime {
        config.driver = fencepost_net::DriverPlacement::Task;
    }
    config
}

fn endpoint_config(server: bool, options: &[(String, String)], connect_timeout: Option<f64>) -> PyResult<EndpointConfig> {
    let transport = transport_from_options(server, options.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| PyValueError::new_err((e.option, e.message)))?;
    let mut config = if server { EndpointConfig::server(transport) } else { EndpointConfig::client(transport) };
    if let Some(t) = connect_timeout {
        if !(t > 0.0 && t.is_finite()) || Duration::try_from_secs_f64(t).is_err() {
            return Err(PyValueError::new_err(("connect-timeout".to_string(), format!("{t} is not a positive number of seconds"))));
        }
        config.connect_timeout = Duration::from_secs_f64(t);
    }
    Ok(config)
}

/// Waits up to `wait` for a first message, then takes whatever else is queued.
fn drain(rx: &Mutex<mpsc::Receiver<String>>, wait: Duration) -> Result<Vec<String>, String> {
    let rx = rx.lock().map_err(|_| "state poisoned".to_string())?;
    let mut out = Vec::new();
    if let Ok(first) = rx.recv_timeout(wait) {
        out.push(first);
        while let Ok(more) = rx.try_recv() {
            out.push(more);
        }
    }
    Ok(out)
}

/// One UDP socket serving fencepost connections.
#[pyclass(name = "Endpoint", module = "fencepost._core", frozen)]
pub struct PyEndpoint {
    inner: Endpoint,
}

#[pymethods]
impl PyEndpoint {
    /// Binds host:port (port 0 picks one). `server` accepts incoming connections.
    #[staticmethod]
    #[pyo3(signature = (host, port, server, options=Vec::new(), connect_timeout=None))]
    fn bind(py: Python<'_>, host: &str, port: u16, server: bool, options: Vec<(String, String)>, connect_timeout: Option<f64>) -> PyResult<Self> {
        let addr = resolve(host, port)?;
        let config = endpoint_config(server, &options, connect_timeout)?;
        let inner = block_on(py, Endpoint::bind(addr, config), None, "bind")?.map_err(net_error)?;
        Ok(PyEndpoint { inner })
    }

    fn local_addr(&self) -> (String, u16) {
        let a = self.inner.local_addr();
        (a.ip().to_string(), a.port())
    }

    /// Opens a connection; TimeoutError naming the address if the peer does not answer.
    #[pyo3(signature = (host, port))]
    fn connect(&self, py: Python<'_>, host: &str, port: u16) -> PyResult<PyConnection> {
        let addr = resolve(host, port)?;
        let endpoint = self.inner.clone();
        let conn = block_on(py, async move { endpoint.connect(addr).await }, None, "connect")?.map_err(net_error)?;
        Ok(PyConnection::new(conn))
    }

    /// asyncio: opens a connection.
    fn connect_async<'py>(&self, py: Python<'py>, host: &str, port: u16) -> PyResult<Bound<'py, PyAny>> {
        let addr = resolve(host, port)?;
        let endpoint = self.inner.clone();
        runtime();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let conn = endpoint.connect(addr).await.map_err(net_error)?;
            Ok(PyConnection::new(conn))
        })
    }

    /// asyncio: the next incoming connection, or None once the endpoint stopped.
    fn accept_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let endpoint = self.inner.clone();
        runtime();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            Ok(endpoint.accept().await.map(PyConnection::new))
        })
    }

    /// The next incoming connection; None if `timeout` passes first or the endpoint stopped.
    #[pyo3(signature = (timeout=None))]
    fn accept(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyConnection>> {
        let endpoint = self.inner.clone();
        match block_on(py, async move { endpoint.accept().await }, timeout, "accept") {
            Ok(conn) => Ok(conn.map(PyConnection::new)),
            Err(e) if e.is_instance_of::<PyTimeoutError>(py) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stops the endpoint at once: its connections end without a goodbye.
    fn shutdown(&self, py: Python<'_>) {
        py.detach(|| self.inner.shutdown());
    }

    /// Datagrams dropped before reaching a connection: (received, malformed, unknown connection, wrong address, refused).
    fn stats(&self, py: Python<'_>) -> (u64, u64, u64, u64, u64) {
        let s = py.detach(|| self.inner.stats());
        (s.datagrams_received, s.malformed, s.unknown_connection, s.wrong_address, s.refused)
    }

    fn connection_count(&self, py: Python<'_>) -> usize {
        py.detach(|| self.inner.connection_count())
    }

    /// The endpoint's static public key (base64), or None without protection.
    fn public_key(&self, py: Python<'_>) -> Option<String> {
        py.detach(|| self.inner.public_key()).map(|k| k.to_string())
    }

    /// Every endpoint counter by name (received, dropped, retries, stateless resets...,
    /// and the kernel's drops at the socket, None where it does not say).
    fn endpoint_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        endpoint_stats_of(py, &self.inner)
    }

    /// A warning (with the fix) when the socket got less receive buffer than fencepost
    /// asks for, else None.
    fn receive_buffer_warning(&self) -> Option<String> {
        self.inner.receive_buffer_warning()
    }
}

/// An endpoint's counters and its socket's kernel drops, as `endpoint_stats` gives them.
fn endpoint_stats_of<'py>(py: Python<'py>, endpoint: &Endpoint) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let (s, drops) = py.detach(|| (endpoint.stats(), endpoint.socket_receive_drops()));
    let d = endpoint_stats_dict(py, &s)?;
    d.set_item("socket_receive_drops", drops)?;
    Ok(d)
}

pub(crate) fn endpoint_stats_dict<'py>(py: Python<'py>, s: &fencepost_proto::EndpointStats) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let d = pyo3::types::PyDict::new(py);
    for (k, v) in [
        ("datagrams_received", s.datagrams_received),
        ("bytes_received", s.bytes_received),
        ("malformed", s.malformed),
        ("unknown_connection", s.unknown_connection),
        ("wrong_address", s.wrong_address),
        ("wrong_version", s.wrong_version),
        ("refused", s.refused),
        ("retries_sent", s.retries_sent),
        ("invalid_tokens", s.invalid_tokens),
        ("forged_handshakes", s.forged_handshakes),
        ("stateless_resets_sent", s.stateless_resets_sent),
        ("stateless_bytes_sent", s.stateless_bytes_sent),
        ("initials_shed", s.initials_shed),
        ("socket_overflows", s.socket_overflows),
        ("socket_overflows_in_floods", s.socket_overflows_in_floods),
        ("socket_fill_holds", s.socket_fill_holds),
        ("peer_address_changes", s.peer_address_changes),
        ("unreachable_reports", s.unreachable_reports),
    ] {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// One connection, a byte stream.
#[pyclass(name = "Connection", module = "fencepost._core", frozen)]
pub struct PyConnection {
    /// Dropped by hand, with the GIL released (see `Drop`).
    inner: ManuallyDrop<Arc<Connection>>,
    /// Held by each send for its whole length: bytes of concurrent `sendall`s (from
    /// threads or tasks) never interleave.
    writer: Arc<tokio::sync::Mutex<()>>,
}

// Everything that takes an endpoint's lock runs with the GIL released: the endpoint's
// driver holds that lock while a congestion controller written in Python runs, which
// needs the GIL. Dropping a connection takes the lock too.
impl Drop for PyConnection {
    fn drop(&mut self) {
        // SAFETY: `inner` is taken once, here, and never used again.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        let mut slot = Some(inner);
        // This thread holds the GIL while Python frees the object: release it for the drop.
        let _ = Python::try_attach(|py| {
            let inner = slot.take();
            py.detach(move || drop(inner));
        });
        drop(slot);
    }
}

impl PyConnection {
    fn new(conn: Connection) -> Self {
        PyConnection { inner: ManuallyDrop::new(Arc::new(conn)), writer: Arc::default() }
    }

    fn conn(&self) -> Arc<Connection> {
        Arc::clone(&self.inner)
    }
}

#[pymethods]
impl PyConnection {
    fn remote_addr(&self) -> (String, u16) {
        let a = self.inner.remote_addr();
        (a.ip().to_string(), a.port())
    }

    /// The server's static public key as the handshake proved it (base64), or None.
    fn peer_key(&self, py: Python<'_>) -> Option<String> {
        py.detach(|| self.inner.peer_key()).map(|k| k.to_string())
    }

    /// The connection's packets are encrypted and authenticated.
    fn is_protected(&self, py: Python<'_>) -> bool {
        py.detach(|| self.inner.is_protected())
    }

    /// Queues what fits of `data` (waiting for room if none); returns how many bytes.
    #[pyo3(signature = (data, timeout=None))]
    fn send(&self, py: Python<'_>, data: Vec<u8>, timeout: Option<f64>) -> PyResult<usize> {
        let conn = self.conn();
        let writer = self.writer.clone();
        block_on(
            py,
            async move {
                let _turn = writer.lock().await;
                conn.send(&data).await
            },
            timeout,
            "send",
        )?
        .map_err(io_error)
    }

    /// Queues all of `data`.
    #[pyo3(signature = (data, timeout=None))]
    fn sendall(&self, py: Python<'_>, data: Vec<u8>, timeout: Option<f64>) -> PyResult<()> {
        let conn = self.conn();
        let writer = self.writer.clone();
        block_on(
            py,
            async move {
                let _turn = writer.lock().await;
                send_all_shared(&conn, data).await
            },
            timeout,
            "sendall",
        )?
        .map_err(io_error)
    }

    /// Up to `size` bytes; b"" once the peer finished its stream.
    #[pyo3(signature = (size, timeout=None))]
    fn recv<'py>(&self, py: Python<'py>, size: usize, timeout: Option<f64>) -> PyResult<Bound<'py, PyBytes>> {
        let conn = self.conn();
        let mut buf = vec![0u8; size.clamp(1, MAX_RECV)];
        let data = block_on(
            py,
            async move {
                let n = conn.recv(&mut buf).await?;
                buf.truncate(n);
                Ok::<Vec<u8>, std::io::Error>(buf)
            },
            timeout,
            "recv",
        )?
        .map_err(io_error)?;
        Ok(PyBytes::new(py, &data))
    }

    /// asyncio: up to `size` bytes (b"" at the end of the peer's stream).
    fn recv_async<'py>(&self, py: Python<'py>, size: usize) -> PyResult<Bound<'py, PyAny>> {
        let conn = self.conn();
        runtime();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let mut buf = vec![0u8; size.clamp(1, MAX_RECV)];
            let n = conn.recv(&mut buf).await.map_err(io_error)?;
            Ok(Python::attach(|py| PyBytes::new(py, &buf[..n]).unbind()))
        })
    }

    /// asyncio: queues all of `data`.
    fn sendall_async<'py>(&self, py: Python<'py>, data: Vec<u8>) -> PyResult<Bound<'py, PyAny>> {
        let conn = self.conn();
        let writer = self.writer.clone();
        runtime();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let _turn = writer.lock().await;
            send_all_shared(&conn, data).await.map_err(io_error)
        })
    }

    /// asyncio: finishes and waits until both sides finished.
    fn close_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let conn = self.conn();
        runtime();
        pyo3_async_runtimes::tokio::future_into_py(py, async move { conn.close().await.map_err(net_error) })
    }

    /// Finishes this side's stream; the peer reads end-of-stream after the data.
    fn finish(&self, py: Python<'_>) {
        py.detach(|| self.inner.finish());
    }

    /// Finishes and waits until both sides finished (or `timeout`).
    #[pyo3(signature = (timeout=None))]
    fn close(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let conn = self.conn();
        block_on(py, async move { conn.close().await }, timeout, "close")?.map_err(net_error)
    }

    fn abort(&self, py: Python<'_>) {
        py.detach(|| self.inner.abort());
    }

    /// (packets sent, data packets sent, retransmissions, packets received, bytes sent, bytes received).
    fn stats(&self, py: Python<'_>) -> (u64, u64, u64, u64, u64, u64) {
        let s = py.detach(|| self.inner.stats());
        (s.packets_sent, s.data_packets_sent, s.retransmissions, s.packets_received, s.bytes_sent, s.bytes_received)
    }
}

/// A running `serve`: poll it for each finished connection's account (JSON).
#[pyclass(name = "Server", module = "fencepost._core", frozen)]
pub struct PyServer {
    endpoint: Endpoint,
    reports: Mutex<mpsc::Receiver<String>>,
}

#[pymethods]
impl PyServer {
    #[staticmethod]
    #[pyo3(signature = (host, port, echo, options=Vec::new()))]
    fn start(py: Python<'_>, host: &str, port: u16, echo: bool, options: Vec<(String, String)>) -> PyResult<Self> {
        let addr = resolve(host, port)?;
        let tool = parse_tool(Command::Serve, &options)?;
        let config = tool_endpoint(true, &tool);
        let endpoint = block_on(py, Endpoint::bind(addr, config), None, "bind")?.map_err(net_error)?;
        let (tx, rx) = mpsc::channel();
        let tx = Arc::new(Mutex::new(tx));
        runtime().spawn(tools::serve(endpoint.clone(), echo, tool.verify, move |summary| {
            if let Ok(json) = serde_json::to_string(&summary) {
                let _ = tx.lock().map(|t| t.send(json));
            }
        }));
        Ok(PyServer { endpoint, reports: Mutex::new(rx) })
    }

    fn local_addr(&self) -> (String, u16) {
        let a = self.endpoint.local_addr();
        (a.ip().to_string(), a.port())
    }

    /// The server's static public key (base64), or None without protection.
    fn public_key(&self, py: Python<'_>) -> Option<String> {
        py.detach(|| self.endpoint.public_key()).map(|k| k.to_string())
    }

    fn endpoint_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        endpoint_stats_of(py, &self.endpoint)
    }

    /// As `Endpoint.receive_buffer_warning`.
    fn receive_buffer_warning(&self) -> Option<String> {
        self.endpoint.receive_buffer_warning()
    }

    /// Finished connections' accounts, waiting up to `timeout` for the first.
    #[pyo3(signature = (timeout=0.2))]
    fn poll(&self, py: Python<'_>, timeout: f64) -> PyResult<Vec<String>> {
        py.check_signals()?;
        let wait = seconds("timeout", timeout)?;
        py.detach(|| drain(&self.reports, wait)).map_err(PyOSError::new_err)
    }

    /// (received, malformed, unknown connection, wrong address, refused) datagrams.
    fn stats(&self, py: Python<'_>) -> (u64, u64, u64, u64, u64) {
        let s = py.detach(|| self.endpoint.stats());
        (s.datagrams_received, s.malformed, s.unknown_connection, s.wrong_address, s.refused)
    }

    fn shutdown(&self, py: Python<'_>) {
        py.detach(|| self.endpoint.shutdown());
    }
}

/// Each connection's summary, or why it failed, as a sender's task returns them.
type SendOutcomes = Vec<Result<tools::SendSummary, NetError>>;

/// A running `send`: poll it for interval reports and, at the end, the summary.
#[pyclass(name = "Sender", module = "fencepost._core", frozen)]
pub struct PySender {
    /// What it was asked to send: (bytes, seconds), one of them set.
    amount: (Option<u64>, Option<f64>),
    intervals: Mutex<mpsc::Receiver<String>>,
    done: Mutex<Option<tokio::task::JoinHandle<SendOutcomes>>>,
    /// The socket's receive buffer warning, if any (see `Endpoint::receive_buffer_warning`).
    receive_warning: Option<String>,
}

#[pymethods]
impl PySender {
    /// Starts sending to host:port, as `send`'s options (`bytes` or `time`, `interval`, transport) say.
    #[staticmethod]
    #[pyo3(signature = (host, port, options=Vec::new()))]
    fn start(py: Python<'_>, host: &str, port: u16, options: Vec<(String, String)>) -> PyResult<Self> {
        let tool = parse_tool(Command::Send, &options)?;
        let target = resolve(host, port)?;
        let amount = match tool.amount {
            Some(fencepost_spec::tools::Amount::Bytes(b)) => Amount::Bytes(b),
            Some(fencepost_spec::tools::Amount::Time(t)) => Amount::Time(Duration::from_micros(t.total_micros())),
            None => unreachable!("send's options always carry an amount"),
        };
        let interval = tool.interval.as_secs_f64();
        let config = tool_endpoint(false, &tool);
        let bind: SocketAddr = if target.is_ipv4() { "0.0.0.0:0".parse() } else { "[::]:0".parse() }.expect("a literal address");
        let endpoint = block_on(py, Endpoint::bind(bind, config), None, "bind")?.map_err(net_error)?;
        let receive_warning = endpoint.receive_buffer_warning();
        let (tx, rx) = mpsc::channel();
        let every = Duration::from_secs_f64(interval.max(0.05));
        let send_options = tools::SendOptions { amount, interval: every, verify: tool.verify, reverse: tool.reverse, bitrate: tool.bitrate };
        let streams = tool.parallel;
        let task = runtime().spawn(async move {
            let report = move |i: tools::Interval| {
                if let Ok(json) = serde_json::to_string(&i) {
                    let _ = tx.send(json);
                }
            };
            let results = tools::send_parallel(&endpoint, target, streams, &send_options, report).await;
            endpoint.shutdown();
            results
        });
        let asked = match amount {
            Amount::Bytes(b) => (Some(b), None),
            Amount::Time(t) => (None, Some(t.as_secs_f64())),
        };
        Ok(PySender { amount: asked, intervals: Mutex::new(rx), done: Mutex::new(Some(task)), receive_warning })
    }

    /// As `Endpoint.receive_buffer_warning`, for the sender's socket (what it receives
    /// matters with `reverse`).
    fn receive_buffer_warning(&self) -> Option<String> {
        self.receive_warning.clone()
    }

    /// (interval reports so far, each naming its stream; once finished, a JSON list of the
    /// streams' summaries, else None). Raises the transfer's error once it failed.
    #[pyo3(signature = (timeout=0.2))]
    fn poll(&self, py: Python<'_>, timeout: f64) -> PyResult<(Vec<String>, Option<String>)> {
        py.check_signals()?;
        let wait = seconds("timeout", timeout)?;
        let out = py.detach(|| drain(&self.intervals, wait)).map_err(PyOSError::new_err)?;
        let mut done = self.done.lock().map_err(|_| PyOSError::new_err("sender state poisoned"))?;
        if done.as_ref().is_some_and(|t| t.is_finished()) {
            let task = done.take().expect("checked above");
            let results = py.detach(|| runtime().block_on(task)).map_err(|e| PyOSError::new_err(format!("send failed: {e}")))?;
            // One stream's failure is the run's: report the first.
            let summaries = results.into_iter().collect::<Result<Vec<_>, _>>().map_err(net_error)?;
            let json = serde_json::to_string(&summaries).map_err(|e| PyOSError::new_err(e.to_string()))?;
            return Ok((out, Some(json)));
        }
        Ok((out, None))
    }

    /// What it was asked to send: (bytes, seconds), one of them None.
    fn amount(&self) -> (Option<u64>, Option<f64>) {
        self.amount
    }

    /// Stops the transfer (Ctrl-C).
    fn cancel(&self) {
        if let Ok(mut done) = self.done.lock() {
            if let Some(task) = done.take() {
                task.abort();
            }
        }
    }
}

/// The seed article's echo benchmark against host:port (`messages`, `seed`,
/// `connect-timeout` and transport options); returns the result as JSON.
#[pyfunction]
#[pyo3(signature = (host, port, options=Vec::new()))]
pub fn echo_bench(py: Python<'_>, host: &str, port: u16, options: Vec<(String, String)>) -> PyResult<String> {
    let tool = parse_tool(Command::EchoBench, &options)?;
    let (messages, seed) = (tool.messages, tool.seed);
    let target = resolve(host, port)?;
    let config = tool_endpoint(false, &tool);
    let bind: SocketAddr = if target.is_ipv4() { "0.0.0.0:0".parse() } else { "[::]:0".parse() }.expect("a literal address");
    let endpoint = block_on(py, Endpoint::bind(bind, config), None, "bind")?.map_err(net_error)?;
    let result = block_on(
        py,
        async move {
            let r = tools::echo_bench(&endpoint, target, messages, seed).await;
            endpoint.shutdown();
            r
        },
        None,
        "echo-bench",
    )?
    .map_err(net_error)?;
    serde_json::to_string(&result).map_err(|e| PyOSError::new_err(e.to_string()))
}

/// A new static key pair from the OS's random source: (private, public), base64.
#[pyfunction]
pub fn keygen() -> PyResult<(String, String)> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| PyOSError::new_err(format!("the OS's random source failed: {e}")))?;
    let key = fencepost_proto::StaticKey::from_seed(seed);
    Ok((key.private_text(), key.public().to_string()))
}

/// The public key (base64) of a private key (base64); ValueError if it is not one.
#[pyfunction]
pub fn public_key(private: &str) -> PyResult<String> {
    fencepost_proto::StaticKey::parse(private).map(|k| k.public().to_string()).map_err(|e| PyValueError::new_err(e.0))
}

/// Queues all of `data`, which the send buffer keeps without copying it again (it was
/// copied once out of the Python object): the whole allocation lives until its last byte
/// is acknowledged, which for "send all of it" is what the caller handed over anyway.
async fn send_all_shared(conn: &fencepost_net::Connection, data: Vec<u8>) -> std::io::Result<()> {
    let mut rest = fencepost_net::Bytes::from(data);
    while !rest.is_empty() {
        let n = conn.send_shared(&rest).await?;
        let _ = rest.split_to(n);
    }
    Ok(())
}

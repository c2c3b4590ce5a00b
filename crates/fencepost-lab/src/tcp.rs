//! Kernel TCP as a lab transport: a bulk sender that picks its congestion
//! control (`TCP_CONGESTION`) and samples `TCP_INFO` while it sends, and a sink
//! that measures goodput where it counts, at the receiver, and answers each
//! sender with the byte count it read (so the sender knows its bytes arrived).

use serde::Serialize;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The start of Linux's `struct tcp_info` up to `tcpi_bytes_retrans` (Linux 4.19);
/// the kernel fills as much as the caller asks for.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct TcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    delivery_flags: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
}

fn tcp_info(stream: &TcpStream) -> io::Result<TcpInfo> {
    let mut info = TcpInfo::default();
    let mut len = std::mem::size_of::<TcpInfo>() as libc::socklen_t;
    let ret = unsafe { libc::getsockopt(stream.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, &mut info as *mut _ as *mut libc::c_void, &mut len) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

fn set_congestion(stream: &TcpStream, cc: &str) -> io::Result<()> {
    let ret = unsafe { libc::setsockopt(stream.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_CONGESTION, cc.as_ptr() as *const libc::c_void, cc.len() as libc::socklen_t) };
    if ret < 0 {
        let e = io::Error::last_os_error();
        let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap_or_default();
        return Err(io::Error::new(e.kind(), format!("TCP congestion control {cc:?}: {e} (this kernel has: {})", available.trim())));
    }
    Ok(())
}

/// One `TCP_INFO` reading.
#[derive(Clone, Debug, Serialize)]
pub struct TcpSample {
    pub t: f64,
    pub cwnd_packets: u32,
    pub ssthresh_packets: u32,
    pub rtt_ms: f64,
    pub rttvar_ms: f64,
    pub bytes_acked: u64,
    pub total_retrans: u32,
    pub delivery_rate_bps: f64,
    pub pacing_rate_bps: f64,
}

impl TcpSample {
    fn from_info(t: f64, i: &TcpInfo) -> TcpSample {
        TcpSample {
            t,
            cwnd_packets: i.snd_cwnd,
            ssthresh_packets: i.snd_ssthresh.min(1 << 30),
            rtt_ms: i.rtt as f64 / 1000.0,
            rttvar_ms: i.rttvar as f64 / 1000.0,
            bytes_acked: i.bytes_acked,
            total_retrans: i.total_retrans,
            delivery_rate_bps: i.delivery_rate as f64 * 8.0,
            pacing_rate_bps: if i.pacing_rate == u64::MAX { 0.0 } else { i.pacing_rate as f64 * 8.0 },
        }
    }
}

/// What a sender saw.
#[derive(Clone, Debug, Serialize)]
pub struct TcpSendReport {
    pub cc: String,
    pub bytes_sent: u64,
    /// What the sink said it read (absent when it never answered).
    pub receiver_bytes: Option<u64>,
    pub duration_s: f64,
    pub segments_sent: u32,
    pub data_segments_sent: u32,
    pub retransmissions: u32,
    pub rtt_mean_ms: Option<f64>,
    pub min_rtt_ms: f64,
    pub samples: Vec<TcpSample>,
    pub error: Option<String>,
    /// When the sender began connecting, in seconds since the Unix epoch.
    pub connect_started_unix: f64,
}

fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

pub struct TcpSendSpec {
    pub target: SocketAddr,
    pub cc: String,
    /// Send this many bytes, or (when `None`) for `duration`.
    pub bytes: Option<u64>,
    pub duration: Duration,
    pub sample_every: Duration,
    pub connect_timeout: Duration,
    /// How long to wait for the sink's count after the last byte is written.
    pub drain_timeout: Duration,
}

/// Connects, sends, closes its side and waits for the sink's byte count.
pub fn send(spec: &TcpSendSpec, stop: &AtomicBool) -> io::Result<TcpSendReport> {
    let connect_started_unix = unix_now();
    let mut stream = TcpStream::connect_timeout(&spec.target, spec.connect_timeout)
        .map_err(|e| io::Error::new(e.kind(), format!("connecting to {}: {e}", spec.target)))?;
    set_congestion(&stream, &spec.cc)?;
    stream.set_nodelay(true)?;
    let started = Instant::now();
    let samples = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stream = stream.try_clone()?;
        let (samples, done, every) = (samples.clone(), done.clone(), spec.sample_every);
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Ok(info) = tcp_info(&stream) {
                    samples.lock().unwrap().push(TcpSample::from_info(started.elapsed().as_secs_f64(), &info));
                }
                std::thread::sleep(every);
            }
        })
    };
    // Bytes that do not compress or repeat in a short period.
    let mut block = vec![0u8; 128 * 1024];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for chunk in block.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    let mut sent = 0u64;
    let mut error = None;
    // A write blocks while the window is full; the timeout lets the loop see the clock and `stop`.
    stream.set_write_timeout(Some(Duration::from_millis(100)))?;
    loop {
        if stop.load(Ordering::Relaxed) {
            error = Some("stopped".to_string());
            break;
        }
        let want = match spec.bytes {
            Some(total) if sent >= total => break,
            Some(total) => (total - sent).min(block.len() as u64) as usize,
            None if started.elapsed() >= spec.duration => break,
            None => block.len(),
        };
        match stream.write(&block[..want]) {
            Ok(n) => sent += n as u64,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted) => {}
            Err(e) => {
                error = Some(format!("write: {e}"));
                break;
            }
        }
    }
    let mut receiver_bytes = None;
    if error.is_none() {
        stream.shutdown(Shutdown::Write)?;
        stream.set_read_timeout(Some(spec.drain_timeout))?;
        let mut count = [0u8; 8];
        match stream.read_exact(&mut count) {
            Ok(()) => receiver_bytes = Some(u64::from_be_bytes(count)),
            Err(e) => error = Some(format!("no byte count from the sink within {:?}: {e}", spec.drain_timeout)),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let info = tcp_info(&stream).unwrap_or_default();
    let mut samples = std::mem::take(&mut *samples.lock().unwrap());
    samples.push(TcpSample::from_info(elapsed, &info));
    let rtts: Vec<f64> = samples.iter().filter(|s| s.rtt_ms > 0.0).map(|s| s.rtt_ms).collect();
    Ok(TcpSendReport {
        cc: spec.cc.clone(),
        bytes_sent: sent,
        receiver_bytes,
        duration_s: elapsed,
        segments_sent: info.segs_out,
        data_segments_sent: info.data_segs_out,
        retransmissions: info.total_retrans,
        rtt_mean_ms: (!rtts.is_empty()).then(|| rtts.iter().sum::<f64>() / rtts.len() as f64),
        min_rtt_ms: info.min_rtt as f64 / 1000.0,
        samples,
        error,
        connect_started_unix,
    })
}

/// One connection, as the sink measured it.
#[derive(Clone, Debug, Serialize)]
pub struct TcpSinkReport {
    pub remote: String,
    pub bytes: u64,
    /// From accepting the connection to the last byte.
    pub duration_s: f64,
    pub goodput_bps: f64,
    pub segments_sent: u32,
    pub error: Option<String>,
    /// Bytes read by each multiple of [`SERIES_INTERVAL`] after the connection was accepted.
    pub delivered_series: Vec<u64>,
    /// When the connection was accepted, in seconds since the Unix epoch.
    pub accepted_unix: f64,
}

/// The spacing of [`TcpSinkReport::delivered_series`] (the same as fencepost's sink).
pub const SERIES_INTERVAL: Duration = Duration::from_millis(100);

fn sink_one(mut stream: TcpStream, accepted: Instant) -> TcpSinkReport {
    let accepted_unix = unix_now() - accepted.elapsed().as_secs_f64();
    let remote = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let mut buf = vec![0u8; 256 * 1024];
    let mut bytes = 0u64;
    let mut last = accepted;
    let mut error = None;
    let mut series = Vec::new();
    loop {
        let got = stream.read(&mut buf);
        let boundaries = (accepted.elapsed().as_micros() / SERIES_INTERVAL.as_micros()) as usize;
        while series.len() < boundaries {
            series.push(bytes);
        }
        match got {
            Ok(0) => break,
            Ok(n) => {
                bytes += n as u64;
                last = Instant::now();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                error = Some(format!("read: {e}"));
                break;
            }
        }
    }
    if error.is_none() {
        if let Err(e) = stream.write_all(&bytes.to_be_bytes()) {
            error = Some(format!("answering the byte count: {e}"));
        }
    }
    let segments_sent = tcp_info(&stream).map(|i| i.segs_out).unwrap_or(0);
    let duration = last.duration_since(accepted).as_secs_f64();
    TcpSinkReport { remote, bytes, duration_s: duration, goodput_bps: if duration > 0.0 { bytes as f64 * 8.0 / duration } else { 0.0 }, segments_sent, error, delivered_series: series, accepted_unix }
}

/// Accepts connections until `stop`, each in its own thread; `report` gets each one's account.
pub fn sink(listener: TcpListener, stop: &AtomicBool, report: impl Fn(TcpSinkReport) + Send + Sync + Clone + 'static) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                let accepted = Instant::now();
                let report = report.clone();
                std::thread::spawn(move || report(sink_one(stream, accepted)));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_transfer_is_counted_at_both_ends() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink_stop = stop.clone();
        let tx = Arc::new(Mutex::new(tx));
        let server = std::thread::spawn(move || sink(listener, &sink_stop, move |r| tx.lock().unwrap().send(r).unwrap()));
        let spec = TcpSendSpec {
            target,
            cc: "reno".into(),
            bytes: Some(5_000_000),
            duration: Duration::from_secs(10),
            sample_every: Duration::from_millis(5),
            connect_timeout: Duration::from_secs(2),
            drain_timeout: Duration::from_secs(5),
        };
        let report = send(&spec, &AtomicBool::new(false)).unwrap();
        assert_eq!(report.error, None);
        assert_eq!((report.bytes_sent, report.receiver_bytes), (5_000_000, Some(5_000_000)));
        assert!(report.segments_sent > 0 && !report.samples.is_empty());
        let at_sink = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(at_sink.bytes, 5_000_000);
        assert!(at_sink.goodput_bps > 0.0);

        let spec = TcpSendSpec { cc: "no-such-cc".into(), ..spec };
        let e = send(&spec, &AtomicBool::new(false)).expect_err("an unknown controller is refused");
        assert!(e.to_string().contains("no-such-cc"), "{e}");
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
    }
}

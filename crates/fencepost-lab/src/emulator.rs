//! The emulator in the lab's middle namespace: the `fencepost-link` model of
//! each direction driven in real time, moving Ethernet frames between two
//! interfaces through packet sockets. Frames arriving on `up_in` cross the
//! `up` link and leave through `down_in`; frames arriving on `down_in` cross
//! the `down` link and leave through `up_in`.
//!
//! IP packets (IPv4 and IPv6) meet the link; anything else (ARP, LLDP) is passed
//! at once, so address resolution never fails because of the emulated loss.
//! The lab sets static neighbours, so normally nothing but IP crosses.
//!
//! Timing: one thread, which sleeps in `ppoll` until the next frame is due or
//! one arrives, and waits the last stretch before a deadline without sleeping,
//! because a sleep can overshoot by tens of microseconds, for at most a quarter
//! of its time (a real-time task that never sleeps is throttled by the kernel).
//! How late each frame left is measured and reported, so the emulator's own
//! error is a figure, not a guess.

use crate::packet_socket::{PacketSocket, MAX_FRAME};
use fencepost_link::{DelayHistogram, Link, LinkConfig, LinkEvent, LinkEventKind, LinkStats};
use serde::Serialize;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const ETHERNET_HEADER: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Below this much time to a deadline the emulator waits without sleeping, while its
/// spin budget lasts (see [`SpinBudget`]).
const SPIN: Duration = Duration::from_micros(250);
/// The share of its time the emulator may spend waiting without sleeping. A bottleneck
/// of full-sized frames above about 50 Mbit/s has a frame due every less than 250 µs,
/// so with a queue standing the emulator spun without end; at its real-time priority the
/// kernel then stopped it for 50 ms of every second (`sched_rt_runtime_us`, "RT
/// throttling activated"), and ten flows through 100 Mbit/s saw frames 24 ms late at
/// the 99th percentile, 45 ms at worst, while the spinning held one of this machine's
/// two cores away from the hosts. Past the budget it sleeps to each deadline and a
/// frame leaves up to a sleep's overshoot late (about 100 µs here), which the lateness
/// figures show.
const SPIN_SHARE: f64 = 0.25;
/// The most spinning the budget saves up while the emulator sleeps: enough for a ping's
/// or a slow link's frames to be timed by spinning all the time.
const SPIN_SAVINGS_US: f64 = 20_000.0;
/// Frames read from one socket before the other gets its turn.
const READ_BURST: usize = 64;

pub struct EmulatorSpec {
    /// The interface facing the link's first host (the client on a line).
    pub up_in: String,
    /// The interface facing the second host.
    pub down_in: String,
    pub up: LinkConfig,
    pub down: LinkConfig,
    pub seed: u64,
    /// A per-packet log (see [`write_event`]).
    pub log: Option<PathBuf>,
    /// Socket buffer per interface, bytes.
    pub socket_buffer: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct DirectionReport {
    pub stats: LinkStats,
    /// Bytes of IP packets (Ethernet header left out, as the simulator counts them) handed on.
    pub ip_bytes_delivered: u64,
    pub queue_delay_p50_ms: Option<f64>,
    pub queue_delay_p95_ms: Option<f64>,
    pub queue_delay_p99_ms: Option<f64>,
    /// How late frames left after the time the link model gave them (the emulator's own timing error).
    pub lateness_p50_us: Option<u64>,
    pub lateness_p99_us: Option<u64>,
    pub lateness_max_us: u64,
    /// Bytes the bottleneck could have carried during the run (none when unlimited).
    pub capacity_bytes: Option<f64>,
    /// Frames the outgoing interface refused.
    pub send_errors: u64,
    /// Frames the kernel dropped before the emulator read them (its socket buffer was full).
    pub kernel_drops: u64,
    /// How long frames waited between the kernel's arrival stamp and the emulator reading them
    /// (taken off their time on the link, so it does not add to the delay).
    pub read_delay_p99_us: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct EmulatorReport {
    pub duration_s: f64,
    pub up: DirectionReport,
    pub down: DirectionReport,
    /// Frames that were not IP and were passed on without meeting the link.
    pub passed_unimpaired: u64,
    /// Frames longer than an interface's MTU (offloads left on); passed to the link whole.
    pub oversize_frames: u64,
    /// The emulator ran at a real-time priority (SCHED_FIFO).
    pub realtime: bool,
    /// The share of the run the emulator spent waiting without sleeping (at most about
    /// [`SPIN_SHARE`] over a long run).
    pub spin_share: f64,
}

struct Side {
    input: PacketSocket,
    link: Link<Vec<u8>>,
    lateness: DelayHistogram,
    lateness_max: u64,
    ip_bytes: u64,
    send_errors: u64,
    kernel_drops: u64,
    /// The latest time the link was run to: a frame's arrival is never put before it.
    link_time: u64,
    /// How long frames waited in the socket before the emulator read them.
    read_delay: DelayHistogram,
}

/// How much waiting without sleeping the emulator may still do: it earns
/// [`SPIN_SHARE`] of the time that passes, up to [`SPIN_SAVINGS_US`], and pays for the
/// time it spins.
struct SpinBudget {
    left_us: f64,
    began: Instant,
    last: Instant,
    /// The pass that last asked spun (its time is charged at the next ask).
    spinning: bool,
    spun_us: f64,
}

impl SpinBudget {
    fn new(now: Instant) -> SpinBudget {
        SpinBudget { left_us: SPIN_SAVINGS_US, began: now, last: now, spinning: false, spun_us: 0.0 }
    }

    /// The share of the time since the budget began spent spinning, the last pass charged.
    fn share_spun(&mut self, now: Instant) -> f64 {
        self.may_spin(now, false);
        self.spun_us / (now.saturating_duration_since(self.began).as_secs_f64() * 1e6).max(1.0)
    }

    /// Whether the pass starting at `now`, which would wait without sleeping if it may
    /// (`wants`), may do so; the time since the last ask is paid for if that pass spun.
    fn may_spin(&mut self, now: Instant, wants: bool) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64() * 1e6;
        self.last = now;
        let mut left = self.left_us + elapsed * SPIN_SHARE;
        if self.spinning {
            left -= elapsed;
            self.spun_us += elapsed;
        }
        self.left_us = left.min(SPIN_SAVINGS_US);
        self.spinning = wants && self.left_us > 0.0;
        self.spinning
    }
}

fn realtime_ns() -> i128 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

fn is_ip(frame: &[u8]) -> bool {
    if frame.len() < ETHERNET_HEADER {
        return false;
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    ethertype == ETHERTYPE_IPV4 || ethertype == ETHERTYPE_IPV6
}

/// A TCP or UDP packet (IPv4 or IPv6): traffic of the run, as opposed to what the
/// hosts' kernels send on their own when an interface comes up (IGMP, say).
fn is_transport(frame: &[u8]) -> bool {
    let ip = &frame[ETHERNET_HEADER..];
    let protocol = match u16::from_be_bytes([frame[12], frame[13]]) {
        ETHERTYPE_IPV4 if ip.len() > 9 => ip[9],
        ETHERTYPE_IPV6 if ip.len() > 6 => ip[6],
        _ => return false,
    };
    protocol == 6 || protocol == 17
}

fn quantile_ms(h: &DelayHistogram, q: f64) -> Option<f64> {
    h.quantile(q).map(|us| us as f64 / 1000.0)
}

/// One line of the per-packet log: `time_us direction event bytes id`, where
/// event is `+` (entered the queue), `>` (left the bottleneck), `-` (handed to the
/// next hop), `d` (lost), `q` (queue full), `b` (blackout), `2` (duplicated).
/// Bytes are the IP packet's. Queueing delay is `>` minus `+` for one id.
pub fn write_event(out: &mut impl Write, direction: &str, e: &LinkEvent) -> io::Result<()> {
    let mark = match e.kind {
        LinkEventKind::Enqueued => '+',
        LinkEventKind::Departed => '>',
        LinkEventKind::Delivered => '-',
        LinkEventKind::Lost => 'd',
        LinkEventKind::QueueDropped => 'q',
        LinkEventKind::BlackoutDropped => 'b',
        LinkEventKind::Duplicated => '2',
    };
    writeln!(out, "{} {direction} {mark} {} {}", e.time, e.size, e.id)
}

/// Runs until `stop` is set; returns what each direction did. `ready` is called
/// once both interfaces are open (frames sent before then are not seen).
pub fn run(spec: EmulatorSpec, stop: &AtomicBool, ready: impl FnOnce()) -> io::Result<EmulatorReport> {
    let realtime = unsafe {
        // Timers as precise as the kernel allows (the default slack is 50 µs), and a
        // real-time priority so a wake-up is not queued behind the hosts' own work on
        // a small machine. Without root the emulator still runs, less precisely.
        libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0);
        let param = libc::sched_param { sched_priority: 20 };
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0
    };
    let up_socket = PacketSocket::open(&spec.up_in, spec.socket_buffer)?;
    let down_socket = PacketSocket::open(&spec.down_in, spec.socket_buffer)?;
    let mut log = match &spec.log {
        Some(path) => Some(BufWriter::with_capacity(1 << 20, std::fs::File::create(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?)),
        None => None,
    };
    if let Some(log) = &mut log {
        writeln!(log, "# fencepost emulator log: time_us direction event bytes id (+ queued, > left bottleneck, - delivered, d lost, q queue full, b blackout, 2 duplicated)")?;
    }
    ready();
    // The links' clock starts with the run's first packet, as the simulator's starts with
    // its flows: a trace is then in the same phase in both, whatever the setup took.
    let mut start = Instant::now();
    let mut timeline_started = false;
    // The two directions draw from separate streams, as the simulator's two channels do.
    let link_specs = [(spec.up.clone(), spec.seed.wrapping_mul(2)), (spec.down.clone(), spec.seed.wrapping_mul(2).wrapping_add(1))];
    let new_link = |i: usize| {
        let (config, seed) = &link_specs[i];
        let mut link = Link::new(config.clone(), *seed, 0);
        link.observe(spec.log.is_some());
        link
    };
    let new_side = |input: PacketSocket, link: Link<Vec<u8>>| {
        Side {
            input,
            link,
            lateness: DelayHistogram::default(),
            lateness_max: 0,
            ip_bytes: 0,
            send_errors: 0,
            kernel_drops: 0,
            link_time: 0,
            read_delay: DelayHistogram::default(),
        }
    };
    let mut sides = [new_side(up_socket, new_link(0)), new_side(down_socket, new_link(1))];
    let mut buf = vec![0u8; MAX_FRAME];
    let mut passed_unimpaired = 0u64;
    let mut oversize = 0u64;
    let now_us = |start: Instant| start.elapsed().as_micros() as u64;
    let mut spin = SpinBudget::new(Instant::now());

    while !stop.load(Ordering::Relaxed) {
        // Hand on everything due; a frame read from side i leaves through the other side's socket.
        for i in 0..2 {
            let now = now_us(start);
            sides[i].link_time = now;
            while let Some(delivery) = sides[i].link.poll_delivery(now) {
                let mut frame = delivery.packet;
                if let Some(at) = delivery.corrupt {
                    // One bit of the IP packet: the receiving kernel's checksums decide what becomes of it.
                    let bits = ((frame.len() - ETHERNET_HEADER) * 8) as u64;
                    if bits > 0 {
                        let bit = ETHERNET_HEADER * 8 + (at % bits) as usize;
                        frame[bit / 8] ^= 1 << (bit % 8);
                    }
                }
                let late = now.saturating_sub(delivery.due);
                let side = &mut sides[i];
                side.lateness.record(late);
                side.lateness_max = side.lateness_max.max(late);
                side.ip_bytes += (frame.len() - ETHERNET_HEADER) as u64;
                let out = &sides[1 - i].input;
                if out.send(&frame).is_err() {
                    sides[i].send_errors += 1;
                }
            }
        }
        if let Some(log) = &mut log {
            for (side, name) in sides.iter_mut().zip(["up", "down"]) {
                for e in side.link.drain_events() {
                    write_event(log, name, &e)?;
                }
            }
        }

        // Sleep until a frame arrives or the next one is due.
        let now = now_us(start);
        let next = sides.iter().filter_map(|s| s.link.poll_timeout()).min();
        let wait = match next {
            Some(t) => Duration::from_micros(t.saturating_sub(now)),
            // Wake now and then to notice `stop`.
            None => Duration::from_millis(50),
        };
        let readable = if spin.may_spin(Instant::now(), wait <= SPIN) {
            // Close to a deadline: look without sleeping.
            [true, true]
        } else {
            let sleep = if wait <= SPIN { wait } else { wait - SPIN };
            let mut fds = [
                libc::pollfd { fd: sides[0].input.raw(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: sides[1].input.raw(), events: libc::POLLIN, revents: 0 },
            ];
            let ts = libc::timespec { tv_sec: sleep.as_secs() as libc::time_t, tv_nsec: sleep.subsec_nanos() as libc::c_long };
            let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
                continue;
            }
            [fds[0].revents & libc::POLLIN != 0, fds[1].revents & libc::POLLIN != 0]
        };
        for i in 0..2 {
            if !readable[i] {
                continue;
            }
            for _ in 0..READ_BURST {
                let Some((n, stamp)) = sides[i].input.recv_stamped(&mut buf)? else { break };
                let n = n.min(buf.len());
                let frame = &buf[..n];
                if !is_ip(frame) {
                    passed_unimpaired += 1;
                    if sides[1 - i].input.send(frame).is_err() {
                        sides[i].send_errors += 1;
                    }
                    continue;
                }
                if n > 1514 {
                    oversize += 1;
                }
                if !timeline_started && is_transport(frame) {
                    timeline_started = true;
                    let waited = stamp.map_or(0, |at| ((realtime_ns() - at).max(0) / 1000) as u64);
                    start = Instant::now() - Duration::from_micros(waited);
                    for (j, side) in sides.iter_mut().enumerate() {
                        side.link_time = 0;
                        // While the emulator waited for the run, a trace's opportunities went by
                        // unused (an unused one is lost), so its phase was the setup's length
                        // behind the simulator's: the ATT LTE trace's first packet left at 150 ms,
                        // the simulator's at 48. A link that holds nothing starts afresh, its
                        // trace and its random draws where the simulator's start.
                        if side.link.is_idle() {
                            side.link = new_link(j);
                        }
                    }
                }
                let now = now_us(start);
                // The frame reached the router when the kernel stamped it; the time it then
                // waited for the emulator to wake is taken off, so it is not extra delay.
                let waited = stamp.map_or(0, |at| ((realtime_ns() - at).max(0) / 1000) as u64);
                let side = &mut sides[i];
                side.read_delay.record(waited);
                let arrival = now.saturating_sub(waited).max(side.link_time);
                side.link_time = arrival;
                side.link.enqueue(arrival, frame.to_vec(), n - ETHERNET_HEADER);
            }
        }
    }

    let elapsed = now_us(start);
    let spin_share = spin.share_spun(Instant::now());
    for side in sides.iter_mut() {
        side.kernel_drops += side.input.kernel_drops();
    }
    if let Some(log) = &mut log {
        for (side, name) in sides.iter_mut().zip(["up", "down"]) {
            for e in side.link.drain_events() {
                write_event(log, name, &e)?;
            }
        }
        log.flush()?;
    }
    let report = |s: &Side| DirectionReport {
        stats: s.link.stats(),
        ip_bytes_delivered: s.ip_bytes,
        queue_delay_p50_ms: quantile_ms(s.link.queue_delay(), 0.5),
        queue_delay_p95_ms: quantile_ms(s.link.queue_delay(), 0.95),
        queue_delay_p99_ms: quantile_ms(s.link.queue_delay(), 0.99),
        lateness_p50_us: s.lateness.quantile(0.5),
        lateness_p99_us: s.lateness.quantile(0.99),
        lateness_max_us: s.lateness_max,
        capacity_bytes: s.link.capacity_bytes(elapsed),
        send_errors: s.send_errors,
        kernel_drops: s.kernel_drops,
        read_delay_p99_us: s.read_delay.quantile(0.99),
    };
    Ok(EmulatorReport {
        duration_s: elapsed as f64 / 1e6,
        up: report(&sides[0]),
        down: report(&sides[1]),
        passed_unimpaired,
        oversize_frames: oversize,
        realtime,
        spin_share,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asked every 10 µs with a deadline always close (a busy fast link), the emulator
    /// spins its savings and then a quarter of the time, never the whole of it.
    #[test]
    fn a_busy_link_spins_a_share_of_the_time_not_all_of_it() {
        let t0 = Instant::now();
        let mut budget = SpinBudget::new(t0);
        let mut spun_passes = 0u32;
        for i in 1..=200_000u64 {
            if budget.may_spin(t0 + Duration::from_micros(10 * i), true) {
                spun_passes += 1;
            }
        }
        // Two seconds: 20 ms saved, then a quarter of the rest.
        let expected = SPIN_SAVINGS_US + 2e6 * SPIN_SHARE;
        assert!((budget.spun_us - expected).abs() < 0.02 * expected, "spun {} µs, expected about {expected}", budget.spun_us);
        assert!(spun_passes < 200_000 / 3, "spun in {spun_passes} of 200000 passes");
    }

    /// A quiet spell saves up no more than the savings bound, and a pass that did not
    /// spin costs nothing.
    #[test]
    fn a_quiet_spell_saves_up_a_bounded_budget() {
        let t0 = Instant::now();
        let mut budget = SpinBudget::new(t0);
        assert!(!budget.may_spin(t0 + Duration::from_secs(10), false));
        assert_eq!(budget.left_us, SPIN_SAVINGS_US);
        assert_eq!(budget.spun_us, 0.0);
        // Spinning from then on, every microsecond: the savings last about 20 ms / 0.75.
        let mut t = t0 + Duration::from_secs(10);
        let mut spinning_for = 0u64;
        while budget.may_spin(t, true) {
            t += Duration::from_micros(1);
            spinning_for += 1;
        }
        let lasts = SPIN_SAVINGS_US / (1.0 - SPIN_SHARE);
        assert!((spinning_for as f64 - lasts).abs() < 10.0, "spun {spinning_for} µs in a row, expected about {lasts}");
    }
}

//! The endpoint's driver: socket in, core, socket out, timers, wake-ups, on its own thread.

use crate::sockio;
use crate::{Shared, State, WakerSet, Waiters};
use fencepost_proto::wire::HandshakeTo;
use fencepost_proto::{DatagramEvent, Event};
use quinn_udp::{RecvMeta, Transmit, BATCH_SIZE};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use tokio::io::Interest;

/// Largest datagram (or GRO-coalesced run of datagrams) one receive buffer holds.
pub(crate) const RECV_BUF: usize = 65_536;
/// Receive batches handled before transmitting again, so a flood of input cannot starve output.
const RECV_ROUNDS: usize = 8;
/// Datagrams one connection gets in a receive call before the driver transmits again: it
/// stops at the first batch boundary past this (with GRO a batch is one buffer of up to 64
/// segments), and at most two receive calls (one after the wait, one before the timers)
/// come between transmits. Acks leave only when the driver transmits, so this bounds how
/// many packets one ack covers (measured between namespaces: 12-15 with SHA-256 at
/// 2 Gbit/s, about 110 at 4 Gbit/s without; acking after every receive call made the acks
/// twice as many and cost the sender CPU without a clear gain in rate). Draining the socket
/// first (up to eight batches of 32 GRO buffers) made it one ack per 400-800 data packets
/// at 2 Gbit/s between namespaces, and at 10 % drop a lost ack then left the sender without
/// news for a long stretch (retransmission timeouts, and a quarter of the rate gone).
/// Two of a sender's turns (`TRANSMIT_BURST` in the core, 64 datagrams), so that one
/// connection's whole turn does not end the pass on its own: at 64, with turns of 64, a
/// pass held one connection's turn. One connection between namespaces kept its rate at
/// 10 % drop with 128 (2830 and 2854 Mbit/s against 2786 and 2767 at 64, interleaved,
/// three runs each; 18 data packets per packet of the receiver's instead of 12); over
/// loopback its acks halved and the receiver's CPU per GB fell from 0.371 to 0.315 s (the
/// sender's 0.353 to 0.361, the time the same; medians of 20 interleaved runs).
const ACK_STRETCH_DATAGRAMS: usize = 2 * fencepost_proto::TRANSMIT_BURST as usize;
/// ... and all connections together, so that input cannot hold output back for long (256
/// datagrams take a few hundred microseconds to open and deliver). When the stretch above
/// (then 64) counted every connection's datagrams, each of 100 connections got a few of them per
/// call and acked every 15-17 of its packets; counted per connection up to this total,
/// 100 connections over loopback took 8 % less CPU per byte, both ends together, with a
/// quarter fewer acks, and one connection's acks stayed as they were (docs/speed.md).
/// Totals of 128 to 512 did about as well as each other.
const RECEIVE_PASS_DATAGRAMS: usize = 256;
/// Handshake packets the driver hands the core in one receive pass before it transmits.
/// Each may cost key agreements (about 50 us of either end's thread for a Noise NX
/// handshake with AWS-LC's X25519, against about 1 us for a data packet), and the
/// answers leave only when the driver transmits. A hundred clients of one socket sent
/// their Initials together, GRO put 64 of them in one buffer, and the server answered
/// none until it had done them all (7 ms), then the client opened all the answers while
/// the server waited: the two ends took turns for the 15-20 ms the handshakes lasted.
/// Once a pass has had these, the Initials after them wait for later passes while the
/// rest goes on (see [`Backlog`]), and the pass ends before a handshake packet to one
/// of our connections: each end works on what the other just sent.
const HANDSHAKES_PER_PASS: u32 = 8;
/// Batch buffers kept for reuse between rounds: a window sent in one round takes dozens,
/// and a new one is zeroed before the core writes into it (4 MiB at most are kept).
const SPARE_BATCHES: usize = 64;
/// A batch buffer's size: room for the largest datagram the core writes.
const BATCH_BUF: usize = 65_536;
/// Batches a turn writes before they are sent and the core is asked again. Unbounded, a
/// turn took everything every connection could send, and when a hundred connections'
/// windows opened together in their first round trips that was megabytes of new batch
/// buffers, each page faulted in: the client of 100 loopback connections took 10,000 page
/// faults and peaked at 24-26 MB resident; with this bound, 1,900 and 13 MB. The rate did
/// not change measurably (11.6 against 12.0 Gbit/s, medians of ten interleaved runs).
const TURN_BATCHES: usize = 8;
/// The most bytes one GSO send carries (the kernel's limit is a 64 KiB IP packet).
const GSO_BYTES: usize = 65_000;
/// The least room the core is given for a datagram: more than any handshake packet needs.
const HANDSHAKE_ROOM: usize = 1_500;

/// Datagrams for one destination, of one size (the last may be shorter), sent in one
/// system call with generic segmentation offload when there are several.
pub(crate) struct Batch {
    pub(crate) destination: SocketAddr,
    /// [`BATCH_BUF`] bytes, the datagrams in `data[..len]`: the core writes each datagram
    /// straight after the previous one, so nothing is copied between core and socket.
    pub(crate) data: Vec<u8>,
    pub(crate) len: usize,
    pub(crate) segment: usize,
    pub(crate) count: usize,
}

impl Batch {
    fn contents(&self) -> &[u8] {
        &self.data[..self.len]
    }

    /// The batch as one send: GSO when it holds several datagrams.
    pub(crate) fn transmit(&self) -> Transmit<'_> {
        Transmit { destination: self.destination, ecn: None, contents: self.contents(), segment_size: (self.count > 1).then_some(self.segment), src_ip: None }
    }

    /// Whether a datagram of up to `max_datagram` bytes may be written after the batch's
    /// own (it joins if it also goes to the same destination and is no longer than the rest).
    pub(crate) fn open_for(&self, max_datagram: usize, max_segments: usize) -> bool {
        self.count < max_segments
            // Only the last segment of a GSO send may be short.
            && self.len == self.count * self.segment
            && self.len + max_datagram <= GSO_BYTES.min(self.data.len())
    }

    fn joins(&self, destination: SocketAddr, size: usize, max_segments: usize) -> bool {
        self.destination == destination && size <= self.segment && self.open_for(size, max_segments)
    }
}

/// Runs the driver on a thread of its own (`DriverPlacement::Thread`, the default), with a
/// single-threaded runtime for the socket and the timers. On the application's runtime
/// (`DriverPlacement::Task`, which an application chooses) it is one task among the
/// application's: a hundred writers each copying megabytes into their send buffers kept
/// it from reading acks for 50 ms and more, long enough for every sender's retransmission
/// timer to fire on a path that lost nothing. Here the OS schedules it beside them.
pub(crate) fn start(shared: Arc<Shared>, socket: std::net::UdpSocket) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
    let name = format!("fencepost-driver {}", shared.local_addr);
    std::thread::Builder::new().name(name).spawn(move || {
        runtime.block_on(async move {
            match DriverSocket::new(socket) {
                Ok(socket) => run(shared, socket).await,
                Err(e) => stop(&shared, format!("socket error: {e}")),
            }
        })
    })?;
    Ok(())
}

/// Runs the driver as a task on the current tokio runtime (`DriverPlacement::Task`).
pub(crate) fn spawn(shared: Arc<Shared>, socket: std::net::UdpSocket) -> io::Result<()> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(io::Error::other("a driver placed on the runtime (DriverPlacement::Task) needs one: bind the endpoint from a task of a tokio runtime"));
    }
    // The driver sleeps until its next timer: without a time driver that would panic
    // inside the task and leave the endpoint silent, so refuse here, with the remedy.
    let has_timers = std::panic::catch_unwind(|| drop(tokio::time::sleep(std::time::Duration::ZERO))).is_ok();
    if !has_timers {
        return Err(io::Error::other(
            "a driver placed on the runtime (DriverPlacement::Task) needs its timers: build the runtime with enable_all() or enable_time()",
        ));
    }
    // Likewise its socket, registered with the runtime's I/O driver, which tokio refuses
    // with a panic where there is none.
    let registered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| DriverSocket::new(socket)));
    let Ok(socket) = registered else {
        return Err(io::Error::other("a driver placed on the runtime (DriverPlacement::Task) needs its I/O: build the runtime with enable_all() or enable_io()"));
    };
    tokio::spawn(run(shared, socket?));
    Ok(())
}

/// Stops the endpoint when the driver goes, however it goes: a driver task is dropped
/// with the runtime it runs on, and its connections' waiters must then hear that the
/// endpoint stopped instead of waiting for a driver that is no more.
/// (Weak: the driver exits when it holds the last strong reference.)
struct StopOnDrop(std::sync::Weak<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(shared) = self.0.upgrade() {
            stop(&shared, "the endpoint's driver stopped (its runtime shut down)".to_string());
        }
    }
}

/// The driver's socket, registered with its runtime (for reading and writing, as a tokio
/// socket is) except while a reader watches it (see `Shared::receive_for_reader`). A
/// registration is edge-triggered and wakes the runtime's thread whether a task waits or
/// not: for every datagram that arrives, and for every one sent (from any thread) once the
/// kernel frees its buffer. In a request/reply exchange that was the driver's thread woken
/// for every request and every reply beside the reader's, to find nothing to do.
struct DriverSocket {
    registered: Option<AsyncFd<std::net::UdpSocket>>,
    /// The socket while it is not registered.
    unregistered: Option<std::net::UdpSocket>,
}

impl DriverSocket {
    fn new(socket: std::net::UdpSocket) -> io::Result<DriverSocket> {
        let mut s = DriverSocket { registered: None, unregistered: Some(socket) };
        s.listen(true)?;
        Ok(s)
    }

    fn socket(&self) -> &std::net::UdpSocket {
        match (&self.registered, &self.unregistered) {
            (Some(registered), _) => registered.get_ref(),
            (None, Some(socket)) => socket,
            (None, None) => unreachable!("the driver's socket is in one place or the other"),
        }
    }

    /// Registers the socket with the runtime, or takes it out. A registration finds
    /// datagrams already waiting (epoll reports them when the socket is added).
    fn listen(&mut self, on: bool) -> io::Result<()> {
        if on {
            if let Some(socket) = self.unregistered.take() {
                // SAFETY: the `UdpSocket` owns its descriptor, which stays open and the same
                // while the `AsyncFd` holds it.
                self.registered = Some(unsafe { AsyncFd::register_with_interest(socket, Interest::READABLE | Interest::WRITABLE)? });
            }
        } else if let Some(registered) = self.registered.take() {
            self.unregistered = Some(registered.into_inner());
        }
        Ok(())
    }

    /// Waits until the socket is readable, or has an error in its error queue (epoll
    /// reports that whatever was asked: an ICMP error about a datagram just sent, which a
    /// lone connect waiting for its handshake's answer would otherwise learn of only at its
    /// next try); never, while it is not registered.
    async fn readable(&self) -> io::Result<AsyncFdReadyGuard<'_, std::net::UdpSocket>> {
        match &self.registered {
            Some(registered) => registered.ready(Interest::READABLE | Interest::ERROR).await,
            None => std::future::pending().await,
        }
    }
}

async fn run(shared: Arc<Shared>, mut socket: DriverSocket) {
    let _stop = StopOnDrop(Arc::downgrade(&shared));
    let mut inbox = Inbox::new();
    let mut out = Outgoing::new(&shared);
    let mut closing = WakerSet::default();
    // One timer for the driver's sleeps, moved only when the deadline moves: a new one each
    // round registered an entry with tokio's timer each time, and one earlier than the
    // runtime's next wake-up makes it wake its I/O driver through its eventfd (two system
    // calls in every other round trip of a ping-pong).
    let sleep = tokio::time::sleep_until(tokio::time::Instant::now() + std::time::Duration::from_secs(1));
    tokio::pin!(sleep);
    // The last receive (the one that ended the wait) read the socket until it was empty.
    let mut drained = false;
    let mut overflow = OverflowWatch::default();
    loop {
        // Nobody holds the endpoint or any of its connections: nothing can use it again.
        if Arc::strong_count(&shared) == 1 {
            return;
        }
        // Acks that arrived while the driver was busy go in before any timer is looked at:
        // after a long burst of sending, the timers are due and the acks that would stop them
        // wait in the socket. (Straight to the socket: tokio learns of new data only when the
        // driver next waits.) Not when the wait just ended in a receive that found the socket
        // empty: nothing was sent since, and the call would only say so again.
        if !std::mem::take(&mut drained) {
            if let Err(e) = receive(&shared, &mut inbox, RECV_ROUNDS, 1, Some(HANDSHAKES_PER_PASS), |iovs, metas| shared.udp.recv(socket.socket().into(), iovs, metas)) {
                stop(&shared, format!("socket error: {e}"));
                closing.wake();
                return;
            }
        }
        let (deadline, sending, reader_watches, this_turn) = {
            let mut st = shared.lock();
            if st.stopped.is_some() {
                return;
            }
            let now = shared.now();
            overflow.look(&shared, &mut st, socket.socket(), now);
            let deadline = turn(&shared, &mut st, &mut out, &mut closing, now);
            // A reader that waits on the socket receives for the driver (see
            // `Shared::receive_for_reader`): the driver looks again when the reader's watch
            // lapses, and until then leaves the socket to it.
            let reader_watches = shared.reader_watches_until();
            let deadline = match (deadline, reader_watches) {
                (Some(d), Some(r)) => Some(d.min(r)),
                (d, r) => d.or(r),
            };
            st.driver_deadline = deadline;
            // While the driver holds datagrams, a writer's thread must not send past them.
            let sending = !out.batches.is_empty();
            st.set_driver_sending(sending);
            st.turns_taken += 1;
            if !sending {
                st.turns_sent = st.turns_taken;
            }
            (deadline, sending, reader_watches.is_some(), st.turns_taken)
        };
        while let Some(batch) = out.next_batch() {
            let sent = send(&shared, &mut socket, &batch).await;
            out.recycle(batch);
            if let Err(e) = sent {
                // A datagram the kernel refuses (a vanished route, ICMP feedback) is a lost
                // packet to the transport, which recovers; only a dead socket stops us.
                if is_fatal(&e) {
                    stop(&shared, format!("socket error: {e}"));
                    closing.wake();
                    return;
                }
            }
        }
        if sending {
            let mut st = shared.lock();
            st.set_driver_sending(false);
            st.turns_sent = this_turn;
        }
        // Only now: the last ack a closed connection owed its peer is on the wire, and an
        // application that exits as soon as `closed()` returns cannot take it with it.
        closing.wake();
        // A driver placed on the application's runtime lets the other tasks run after each
        // turn. Under load its socket always had more, so it seldom reached a wait that
        // blocked, and the readers it woke waited behind pass after pass while their
        // receive buffers grew: 100 connections on a current-thread runtime spent a third
        // of the server's time faulting those pages in (11.4 Gbit/s; with this 19.9, and
        // 0.32 s of server CPU per GB against 0.68).
        if shared.config.driver == crate::DriverPlacement::Task {
            tokio::task::yield_now().await;
        }
        if out.more_due() {
            // The core has more to send now: the next turn follows at once (after the acks
            // that came meanwhile).
            continue;
        }
        let sleep_until = deadline.map_or_else(
            // With nothing scheduled, look again each second whether the endpoint was let go.
            || tokio::time::Instant::now() + std::time::Duration::from_secs(1),
            |t| tokio::time::Instant::from_std(shared.instant(t)),
        );
        if sleep.deadline() != sleep_until {
            sleep.as_mut().reset(sleep_until);
        }
        if let Err(e) = socket.listen(!reader_watches) {
            stop(&shared, format!("socket error: {e}"));
            return;
        }
        tokio::select! {
            // Input first when several are ready, for the same reason.
            biased;
            ready = socket.readable() => {
                let mut ready = match ready {
                    Ok(ready) => ready,
                    Err(e) => {
                        stop(&shared, format!("socket error: {e}"));
                        return;
                    }
                };
                // The error queue is read on the next turn; the receive below ends in a
                // WouldBlock, which clears this readiness with the rest.
                if ready.ready().is_error() {
                    note_icmp(&shared);
                }
                // Through tokio's readiness, which a WouldBlock resets.
                let received = receive(&shared, &mut inbox, RECV_ROUNDS, 1, Some(HANDSHAKES_PER_PASS), |iovs, metas| {
                    match ready.try_io(|input| shared.udp.recv(input.get_ref().into(), iovs, metas)) {
                        Ok(result) => result,
                        Err(_would_block) => Err(io::ErrorKind::WouldBlock.into()),
                    }
                });
                match received {
                    Ok(empty) => drained = empty,
                    Err(e) => {
                        stop(&shared, format!("socket error: {e}"));
                        return;
                    }
                }
            }
            _ = &mut sleep => {}
            _ = shared.wake_driver.notified() => {}
        }
        shared.driver_wakeups.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How often the driver asks the kernel whether the socket dropped datagrams (one
/// `getsockopt` each time it looks): a window held a millisecond late lets a millisecond
/// more of the senders' flights in.
const OVERFLOW_LOOK: fencepost_proto::Duration = fencepost_proto::Duration::from_millis(1);

/// How full the socket's buffer may get, in quarters of what the kernel charges against it
/// (`SK_MEMINFO_RMEM_ALLOC` against `SO_RCVBUF`), before the driver holds the receiving
/// connections' windows as an overflow does, before one comes: the windows of many
/// connections sending over loopback (100 bulk connections of 8 kB packets, whose rate
/// estimates measure their turns' bursts) add up to more than the socket holds, and when
/// the receiving host fell behind for a moment the queue grew to the buffer's end: thousands
/// of packets dropped, in about one 1 GB run in six. Three quarters: UDP gives back the
/// memory of datagrams already read in batches of up to a quarter of the buffer while the
/// queue is not empty, so a charge this high is at least half a buffer of datagrams queued.
const HOLD_AT_QUARTERS: u64 = 3;

/// The kernel's count of receive drops at the socket as last seen, and when to look next.
#[derive(Default)]
pub(crate) struct OverflowWatch {
    seen: u64,
    next_look: fencepost_proto::Instant,
}

impl OverflowWatch {
    /// At most once per [`OVERFLOW_LOOK`]: drops since the last look (the socket's buffer
    /// overflowed), or a buffer charged past [`HOLD_AT_QUARTERS`] of its size (about to),
    /// have the core hold the receiving connections' windows to what the socket holds
    /// (`fencepost_proto::Endpoint::note_socket_overflow` and `note_socket_filling`).
    pub(crate) fn look(&mut self, shared: &Shared, st: &mut State, socket: &std::net::UdpSocket, now: fencepost_proto::Instant) {
        let Some(buffer) = shared.receive_buffer else { return };
        if now < self.next_look {
            return;
        }
        self.next_look = now + OVERFLOW_LOOK;
        let Some(memory) = crate::receive_memory_of(socket) else { return };
        if memory.drops > self.seen {
            // The first look counts what came before the driver did (none, on a new socket).
            st.proto.note_socket_overflow(now, buffer);
        } else if memory.charged * 4 > buffer as u64 * HOLD_AT_QUARTERS {
            st.proto.note_socket_filling(now, buffer);
        }
        self.seen = memory.drops;
    }
}

/// One turn of the core under the endpoint's lock at `now` (`Shared::now`, read by the
/// caller: the socket's look just before takes the same reading, where a clock read each
/// was a few percent of a blocking ping-pong's instructions): its timers, then everything
/// due to be sent (into `out`), then its events to the tasks waiting on them. Returns the
/// core's next deadline.
pub(crate) fn turn(shared: &Shared, st: &mut State, out: &mut Outgoing, closing: &mut WakerSet, now: fencepost_proto::Instant) -> Option<fencepost_proto::Instant> {
    take_unreachable(shared, st, now);
    st.proto.handle_timeout(now);
    let memory_due = return_memory(st, now);
    for (destination, response) in std::mem::take(&mut st.responses) {
        out.add(destination, &response);
    }
    collect_transmits(st, now, out);
    dispatch(st, closing);
    closing.take_from(&mut st.closing_after_send);
    // Waiters on a closed connection's last ack: it is in this turn's batches if it is
    // anywhere, so they are woken with the others once those are sent.
    let State { flush_waits, waiters, .. } = st;
    for handle in flush_waits.drain(..) {
        if let Some(w) = waiters.get_mut(&handle) {
            closing.take_from(&mut w.closed);
        }
    }
    match (st.proto.poll_timeout(), memory_due) {
        (Some(core), Some(memory)) => Some(core.min(memory)),
        (core, memory) => core.or(memory),
    }
}

/// Quiet connections give back what their buffers grew to (`fencepost_proto::Connection::
/// take_given_back`), but glibc's allocator keeps freed memory for the process to reuse:
/// 100 connections left idle after echoing 4 MB each had freed 176 MB that stayed
/// resident until `malloc_trim` returned it (245 MB → 69 MB). Asked once this much was
/// given back, at most once in [`RETURN_MEMORY_EVERY`] ...
const RETURN_MEMORY_FROM: usize = 16 << 20;
const RETURN_MEMORY_EVERY: fencepost_proto::Duration = fencepost_proto::Duration::from_secs(1);
/// ... or, when at least this much was given back and no more for [`RETURN_MEMORY_EVERY`]:
/// the last connections to fall quiet gave back less than [`RETURN_MEMORY_FROM`] between
/// them, and it stayed resident for as long as the server was idle (the same 100
/// connections measured 84-112 MB a few seconds later, or 50 MB when the last trim
/// happened to come after them). Elsewhere than glibc, the allocator decides alone.
const RETURN_MEMORY_LEAST: usize = 1 << 20;

/// Whether to ask the allocator now (`Ok`) about `pending` bytes given back, unchanged
/// since `since`, when it was last asked at `returned_at`; if not, when to look again
/// (`None`: too little to ask about).
fn memory_return_due(pending: usize, since: fencepost_proto::Instant, returned_at: Option<fencepost_proto::Instant>, now: fencepost_proto::Instant) -> Result<(), Option<fencepost_proto::Instant>> {
    if pending < RETURN_MEMORY_LEAST {
        return Err(None);
    }
    let allowed_at = returned_at.map_or(now, |at| at + RETURN_MEMORY_EVERY);
    let due_at = if pending >= RETURN_MEMORY_FROM { allowed_at } else { allowed_at.max(since + RETURN_MEMORY_EVERY) };
    if now < due_at { Err(Some(due_at)) } else { Ok(()) }
}

/// Asks the allocator to return what quiet connections gave back, when due (see
/// [`memory_return_due`]); returns when to look again if something is pending.
fn return_memory(st: &mut State, now: fencepost_proto::Instant) -> Option<fencepost_proto::Instant> {
    let pending = st.proto.given_back();
    if pending != st.memory_pending.0 {
        st.memory_pending = (pending, now);
    }
    if let Err(again) = memory_return_due(pending, st.memory_pending.1, st.memory_returned_at, now) {
        return again;
    }
    st.proto.take_given_back();
    st.memory_pending = (0, now);
    st.memory_returned_at = Some(now);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // On a thread of its own: it took 1-11 ms over 300 such connections, which under
        // the endpoint's lock every connection would wait out. One at a time.
        static RUNNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !RUNNING.swap(true, std::sync::atomic::Ordering::AcqRel) {
            let spawned = std::thread::Builder::new().name("fencepost-trim".into()).spawn(|| {
                // SAFETY: malloc_trim only returns free memory to the system; it takes no pointers.
                unsafe { libc::malloc_trim(0) };
                RUNNING.store(false, std::sync::atomic::Ordering::Release);
            });
            if spawned.is_err() {
                RUNNING.store(false, std::sync::atomic::Ordering::Release);
            }
        }
    }
    None
}

/// Datagrams on their way to the socket, in batches, and buffers kept for the next ones.
pub(crate) struct Outgoing {
    batches: std::collections::VecDeque<Batch>,
    spare: Vec<Vec<u8>>,
    /// The last turn stopped at [`TURN_BATCHES`] with more to send: the next comes at once.
    more_due: bool,
    max_segments: usize,
}

impl Outgoing {
    pub(crate) fn new(shared: &Shared) -> Outgoing {
        Outgoing {
            batches: std::collections::VecDeque::new(),
            spare: Vec::new(),
            more_due: false,
            max_segments: shared.udp.max_gso_segments().max(1),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Whether the last turn left datagrams the core would send now (see [`TURN_BATCHES`]):
    /// once this turn's batches are sent, another turn is due without waiting.
    pub(crate) fn more_due(&self) -> bool {
        self.more_due
    }

    /// The oldest batch not yet sent; hand its buffer back with [`Outgoing::recycle`].
    pub(crate) fn next_batch(&mut self) -> Option<Batch> {
        self.batches.pop_front()
    }

    pub(crate) fn recycle(&mut self, batch: Batch) {
        if self.spare.len() < SPARE_BATCHES && batch.data.len() == BATCH_BUF {
            self.spare.push(batch.data);
        }
    }

    /// A batch buffer: a spare one, or a new one.
    fn buffer(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_else(|| vec![0; BATCH_BUF])
    }

    /// Appends a datagram written elsewhere (a stateless response, one the writer's thread
    /// could not send) to the last batch if GSO can carry it there, or starts a new batch.
    fn add(&mut self, destination: SocketAddr, datagram: &[u8]) {
        if datagram.len() > BATCH_BUF {
            return; // never written by the core; a datagram UDP cannot carry anyway
        }
        let max_segments = self.max_segments;
        if let Some(b) = self.batches.back_mut().filter(|b| b.joins(destination, datagram.len(), max_segments)) {
            b.data[b.len..b.len + datagram.len()].copy_from_slice(datagram);
            b.len += datagram.len();
            b.count += 1;
            return;
        }
        // A flood of handshakes makes a batch per source address: without a spare buffer,
        // one just the datagram's size (the core then writes into buffers of its own).
        let data = match self.spare.pop() {
            Some(mut data) => {
                data[..datagram.len()].copy_from_slice(datagram);
                data
            }
            None => datagram.to_vec(),
        };
        self.batches.push_back(Batch { destination, data, len: datagram.len(), segment: datagram.len(), count: 1 });
    }
}

/// Where received datagrams land: [`BATCH_SIZE`] buffers of [`RECV_BUF`] bytes.
pub(crate) struct Inbox {
    storage: Vec<u8>,
    metas: Vec<RecvMeta>,
}

impl Inbox {
    pub(crate) fn new() -> Inbox {
        Inbox { storage: vec![0u8; RECV_BUF * BATCH_SIZE], metas: vec![RecvMeta::default(); BATCH_SIZE] }
    }
}

/// A send error that stops the endpoint: EBADF, the socket itself is gone. Anything else
/// the kernel refuses (a vanished route, ICMP feedback) is a lost packet to the transport.
pub(crate) fn is_fatal(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EBADF)
}

/// A receive error that is not the socket's: an ICMP error about an earlier send (noted
/// for the next turn, see [`take_unreachable`]), or a signal that interrupted the call.
pub(crate) fn is_passing(shared: &Shared, e: &io::Error) -> bool {
    if sockio::is_icmp_report(e) {
        note_icmp(shared);
        return true;
    }
    matches!(e.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted)
}

/// The socket has errors waiting in its error queue (or a send found no route): the
/// driver reads them on its next turn, which comes at once.
pub(crate) fn note_icmp(shared: &Shared) {
    shared.icmp_pending.store(true, std::sync::atomic::Ordering::Relaxed);
    shared.wake_driver.notify_one();
}

/// Sends `transmit` from the endpoint's `socket` (see [`sockio::try_send`]). A send that
/// returns an ICMP error about an earlier datagram sent nothing (the kernel hands the error
/// to whichever call comes next): the error is noted and the send made again, once.
/// A send the kernel refuses with network or host unreachable when no ICMP error was
/// pending is this host's own word that it has no route there: it is reported for the
/// destination as an ICMP error would be (a connect fails at once, as a TCP one does).
pub(crate) fn try_send(shared: &Shared, socket: &impl std::os::fd::AsFd, connected_to: Option<SocketAddr>, transmit: &Transmit<'_>) -> io::Result<()> {
    let v6 = shared.local_addr.is_ipv6();
    let sent = match sockio::try_send(&shared.udp, socket, v6, connected_to, transmit) {
        Err(e) if sockio::is_icmp_report(&e) => {
            note_icmp(shared);
            sockio::try_send(&shared.udp, socket, v6, connected_to, transmit)
        }
        sent => sent,
    };
    // The first error, if any, was a pending one the kernel handed over; a second is this send's own.
    if let Err(e) = &sent {
        if let Some(errno @ (libc::ENETUNREACH | libc::EHOSTUNREACH)) = e.raw_os_error() {
            let mut unroutable = shared.unroutable.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            // (Read each turn; the bound only caps a turn that is slow to come.)
            if unroutable.len() < 1024 {
                unroutable.push((transmit.destination, errno));
            }
            note_icmp(shared);
        }
    }
    sent
}

/// Where an ICMP error's errno (the kernel's reading of its type and code) says the
/// packets stop, if it says they cannot reach the peer (see
/// `fencepost_proto::Connection::on_unreachable`).
fn unreachable_at(errno: i32) -> Option<fencepost_proto::Unreachable> {
    match errno {
        libc::ECONNREFUSED => Some(fencepost_proto::Unreachable::Port),
        libc::EHOSTUNREACH => Some(fencepost_proto::Unreachable::Host),
        libc::ENETUNREACH => Some(fencepost_proto::Unreachable::Network),
        _ => None,
    }
}

/// How often the driver reads the socket's error queue when no call has said anything
/// waits there: errors this host raises itself (a send too large for the route) are
/// queued without being handed to any call, and each holds receive buffer until read.
const ERRORS_READ_EVERY: fencepost_proto::Duration = fencepost_proto::Duration::from_secs(1);

/// Reads the errors waiting in the socket's error queue, if a send or receive said some
/// came (or [`ERRORS_READ_EVERY`] passed), and tells the core which destinations the ICMP
/// ones name, and which ones this host found no route to (see [`try_send`]). (Should
/// another ICMP error come between a send's two tries, the second try's would be taken
/// for the send's own: a client still waiting for its first answer from that destination
/// would end for it, which forging an ICMP error about it could do anyway.)
fn take_unreachable(shared: &Shared, st: &mut State, now: fencepost_proto::Instant) {
    let said = shared.icmp_pending.swap(false, std::sync::atomic::Ordering::Relaxed);
    if !said && now < st.errors_read_at + ERRORS_READ_EVERY {
        return;
    }
    st.errors_read_at = now;
    let (mut reports, more) = sockio::take_icmp_errors(&shared.inline_socket);
    if more {
        note_icmp(shared);
    }
    reports.append(&mut shared.unroutable.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
    for (destination, errno) in reports {
        if let Some(what) = unreachable_at(errno) {
            st.proto.on_unreachable(now, &normalize(destination), what);
        }
    }
}

fn stop(shared: &Shared, why: String) {
    let mut st = shared.lock();
    st.stopped.get_or_insert(why);
    for w in st.waiters.values_mut() {
        w.wake_all();
    }
    st.accept_waiter.wake();
}

/// Initials a driver keeps waiting at most (see [`Backlog`]): about 50 ms of a server's
/// key agreements at some 50 µs each, and 1.3 MB of datagrams. Beyond it the newest are
/// dropped unopened and counted (`initials_shed`); a real peer asks again.
const WAITING_INITIALS: usize = 1024;

/// Datagrams a receive read and the core has not had yet. Whoever receives next (the
/// driver or a reader) hands these over before reading the socket again.
/// - `runs`: the rest of a call whose pass ended on a handshake packet to one of our
///   connections (a client's Accepts) once the pass had [`HANDSHAKES_PER_PASS`]: they
///   go first and in order, since what a connection's peer sent after its handshake
///   needs the handshake's keys. Filled only from a receive call, and only while empty.
/// - `initials`: Initials that came once the pass had its handshakes. They wait, oldest
///   first, [`HANDSHAKES_PER_PASS`] of them at the start of each pass, while what came
///   behind them (the established connections' data and acks) goes on at once: a
///   thousand clients connecting together put 50 ms of a server's key agreements in its
///   socket ahead of the data of those already connected, and with the datagrams taken
///   in order, connections waited past the 50 ms least retransmission timeout for acks
///   (300-450 spurious timeouts per thousand connections of 1 MB over loopback). Nothing
///   of a connection can come after its Initial but another Initial (its peer waits for
///   the answer), so taking them later reorders nothing a connection sees.
#[derive(Default)]
pub(crate) struct Backlog {
    /// Each receive buffer's rest: where from, GRO's stride, the datagrams.
    runs: std::collections::VecDeque<(SocketAddr, usize, Vec<u8>)>,
    initials: std::collections::VecDeque<(SocketAddr, Vec<u8>)>,
}

impl Backlog {
    pub(crate) fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.initials.is_empty()
    }

    /// Hands the core waiting Initials, oldest first, until the pass has its handshakes
    /// (all of them without a bound); returns how many went.
    fn deliver_initials(&mut self, st: &mut State, now: fencepost_proto::Instant, handshakes: Option<u32>) -> usize {
        let mut handled = 0;
        while !handshakes_done(st, handshakes) {
            let Some((from, mut datagram)) = self.initials.pop_front() else { break };
            hand_to_core(st, now, from, &mut datagram);
            handled += 1;
        }
        handled
    }

    /// Hands the core the runs held, up to a handshake packet to one of our connections
    /// once the pass has its handshakes (Initials then wait); returns how many went.
    fn deliver_runs(&mut self, st: &mut State, now: fencepost_proto::Instant, handshakes: Option<u32>) -> usize {
        let mut handled = 0;
        while let Some((from, stride, mut data)) = self.runs.pop_front() {
            let (count, rest) = deliver_until(st, now, from, stride, &mut data, handshakes, &mut self.initials);
            handled += count;
            if rest < data.len() {
                data.drain(..rest);
                self.runs.push_front((from, stride, data));
                break;
            }
        }
        handled
    }
}

/// Reads the socket into the core, up to `rounds` receive calls, through `recv` (one
/// call of `recvmmsg`, straight or through tokio's readiness), each offered at least
/// `buffers_at_least` buffers (a reader offers two, to learn from a call that fills one
/// that the socket is empty behind it). With `handshakes` (the driver's), a pass hands
/// the core that many handshake packets at most: Initials beyond wait in the
/// [`Backlog`] while the rest goes on, and the pass ends before a handshake packet to
/// one of our connections, which waits there with what came after it; the driver is
/// woken for what waits, to come back once it has transmitted.
/// Returns whether the caller may transmit and then wait: the socket was empty, or the
/// pass ended on its handshakes (not at another bound: there is more to read at once).
pub(crate) fn receive(
    shared: &Shared,
    inbox: &mut Inbox,
    rounds: usize,
    buffers_at_least: usize,
    handshakes: Option<u32>,
    mut recv: impl FnMut(&mut [IoSliceMut<'_>], &mut [RecvMeta]) -> io::Result<usize>,
) -> io::Result<bool> {
    // As many buffers as hold an ack stretch when GRO fills each (one at 64 segments, all
    // of them without GRO), so one receive call does not take in many stretches at once.
    let buffers = (ACK_STRETCH_DATAGRAMS / shared.udp.gro_segments().max(1)).max(buffers_at_least).clamp(1, inbox.metas.len());
    let (mut handled, mut longest_run) = (0, 0);
    for round in 0..rounds {
        if longest_run >= ACK_STRETCH_DATAGRAMS || handled >= RECEIVE_PASS_DATAGRAMS {
            break;
        }
        // From the receive to the delivery, no other receive (see `Shared::receiving`).
        let mut backlog = shared.receiving.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if round == 0 && !backlog.initials.is_empty() {
            let mut st = shared.lock();
            st.proto.begin_receive_pass();
            handled += backlog.deliver_initials(&mut st, shared.now(), handshakes);
        }
        if !backlog.runs.is_empty() {
            let mut st = shared.lock();
            if handled == 0 {
                st.proto.begin_receive_pass();
            }
            handled += backlog.deliver_runs(&mut st, shared.now(), handshakes);
            longest_run = st.proto.longest_receive_run() as usize;
            // (What is held goes at once without a bound: it is left only at one.)
            if !backlog.runs.is_empty() {
                return Ok(ended_on_handshakes(shared, &backlog));
            }
            continue;
        }
        let mut iovs: Vec<IoSliceMut<'_>> = inbox.storage.chunks_mut(RECV_BUF).take(buffers).map(IoSliceMut::new).collect();
        let metas = &mut inbox.metas[..buffers];
        let count = match recv(&mut iovs, metas) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(ended_on_handshakes(shared, &backlog)),
            Err(e) if is_passing(shared, &e) => continue,
            Err(e) => return Err(e),
        };
        drop(iovs);
        let mut st = shared.lock();
        let now = shared.now();
        if handled == 0 {
            st.proto.begin_receive_pass();
        }
        let mut cut = false;
        for (meta, buf) in metas.iter().take(count).zip(inbox.storage.chunks_mut(RECV_BUF)) {
            let buf = &mut buf[..meta.len];
            if cut {
                backlog.runs.push_back((meta.addr, meta.stride, buf.to_vec()));
                continue;
            }
            let (delivered, rest) = deliver_until(&mut st, now, meta.addr, meta.stride, buf, handshakes, &mut backlog.initials);
            handled += delivered;
            if rest < buf.len() {
                cut = true;
                backlog.runs.push_back((meta.addr, meta.stride, buf[rest..].to_vec()));
            }
        }
        longest_run = st.proto.longest_receive_run() as usize;
        if cut {
            return Ok(ended_on_handshakes(shared, &backlog));
        }
    }
    // More to read at once; Initials left waiting need the driver back even if not.
    wake_for_backlog(shared, &shared.receiving.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
    Ok(false)
}

/// Hands the core the datagrams of one receive buffer from `from`: one, or with GRO
/// several of `stride` bytes (the last may be shorter). Each is opened where it lies (the
/// buffer is refilled by the next receive anyway). Returns how many there were.
pub(crate) fn deliver(st: &mut State, now: fencepost_proto::Instant, from: SocketAddr, stride: usize, buf: &mut [u8]) -> usize {
    let mut initials = std::collections::VecDeque::new();
    deliver_until(st, now, from, stride, buf, None, &mut initials).0
}

/// A pass that ended with datagrams left for later (its handshakes were had): they wait
/// in the backlog, and the driver is woken to come back for them once it has
/// transmitted. The caller may transmit (`true`).
fn ended_on_handshakes(shared: &Shared, backlog: &Backlog) -> bool {
    wake_for_backlog(shared, backlog);
    true
}

/// Wakes the driver if datagrams wait in the backlog: it may be about to wait on a socket
/// with nothing new in it.
fn wake_for_backlog(shared: &Shared, backlog: &Backlog) {
    if !backlog.is_empty() {
        shared.wake_driver.notify_one();
    }
}

/// Whether the pass has had its `handshakes` (never without a bound).
fn handshakes_done(st: &State, handshakes: Option<u32>) -> bool {
    handshakes.is_some_and(|bound| st.proto.receive_pass_handshakes() >= bound)
}

/// As [`deliver`], with the pass's bound of `handshakes` packets, if given: once it is
/// reached, an Initial waits in `initials` (or is shed when as many wait as are kept)
/// and the rest goes on, up to a handshake packet to one of our connections, where it
/// stops. Returns how many went to the core and where the rest of `buf` begins.
fn deliver_until(
    st: &mut State,
    now: fencepost_proto::Instant,
    from: SocketAddr,
    stride: usize,
    buf: &mut [u8],
    handshakes: Option<u32>,
    initials: &mut std::collections::VecDeque<(SocketAddr, Vec<u8>)>,
) -> (usize, usize) {
    let mut count = 0;
    let stride = stride.max(1);
    for (i, datagram) in buf.chunks_mut(stride).enumerate() {
        if handshakes_done(st, handshakes) {
            match fencepost_proto::wire::handshake_to(datagram) {
                Some(HandshakeTo::NewConnection) => {
                    if initials.len() < WAITING_INITIALS {
                        initials.push_back((from, datagram.to_vec()));
                    } else {
                        st.proto.shed_initial(datagram.len());
                    }
                    continue;
                }
                Some(HandshakeTo::Connection) => return (count, i * stride),
                None => {}
            }
        }
        count += 1;
        hand_to_core(st, now, from, datagram);
    }
    (count, buf.len())
}

/// Hands one datagram to the core and does what it asks: a new connection accepted, a
/// stateless answer queued.
fn hand_to_core(st: &mut State, now: fencepost_proto::Instant, from: SocketAddr, datagram: &mut [u8]) {
    let mut response = [0u8; 64];
    match st.proto.handle_datagram_in_place(now, normalize(from), datagram, &mut response) {
        Some(DatagramEvent::NewConnection(incoming)) => accept_incoming(st, from, incoming),
        Some(DatagramEvent::Response { destination, transmit }) => {
            st.responses.push((destination, response[..transmit.size].to_vec()));
        }
        Some(DatagramEvent::Connection(_)) | None => {}
    }
}

/// A server takes a new connection. Out of line: the connection it builds is kilobytes,
/// and inlined into [`hand_to_core`] it made every datagram's call reserve (and probe)
/// 7.5 kB of stack, 0.5 kB without. In a loopback transfer's profile the samples of
/// `hand_to_core`'s prologue then went to its first look at the connection instead: no
/// gain in CPU this host could show, but the hot path no longer pays for the rare one.
#[cold]
#[inline(never)]
fn accept_incoming(st: &mut State, from: SocketAddr, mut incoming: fencepost_proto::Incoming<SocketAddr>) {
    if let Some(route) = st.routes.route_to(from) {
        incoming.fit_route(route);
    }
    // The endpoint already refused what exceeds max_connections; a server takes the rest.
    if let Ok(handle) = st.proto.accept(incoming) {
        st.waiters.insert(handle, Waiters::default());
        st.accept_queue.push_back(handle);
        st.accept_waiter.wake();
    }
}

/// IPv4 peers of a dual-stack socket appear as v4-mapped v6 addresses; use the v4 form consistently.
pub(crate) fn normalize(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

/// The room to give the core for each datagram it writes: the longest packet any
/// connection sends (wider where a connection's peer is this host), and never less than an
/// Ethernet frame's, which every handshake packet fits (with 16-byte payloads the data
/// packets are 50 bytes, the Initial at least 256). More room never makes a packet larger.
pub(crate) fn datagram_room(proto: &fencepost_proto::Endpoint<SocketAddr>) -> usize {
    proto.widest_datagram().clamp(HANDSHAKE_ROOM, BATCH_BUF)
}

/// Everything the connections have to send now, written by the core straight into the
/// batch buffers: after the last batch's datagrams while one more of any size fits there,
/// else at the start of a new buffer.
fn collect_transmits(st: &mut State, now: fencepost_proto::Instant, out: &mut Outgoing) {
    let (max_datagram, max_segments) = (datagram_room(&st.proto), out.max_segments);
    out.more_due = false;
    loop {
        // (The last batch is looked at only once the count is reached.)
        if out.batches.len() >= TURN_BATCHES && !out.batches.back().is_some_and(|b| b.open_for(max_datagram, max_segments)) {
            // Full: these go out first. Only asking tells whether more is due, so the next
            // turn asks (and, if nothing is left, finds that at once).
            out.more_due = true;
            return;
        }
        match out.batches.back_mut().filter(|b| b.open_for(max_datagram, max_segments)) {
            Some(b) => {
                let start = b.len;
                let Some((destination, transmit)) = st.proto.poll_transmit(now, &mut b.data[start..start + max_datagram]) else { return };
                if destination == b.destination && transmit.size <= b.segment {
                    // open_for(max_datagram) held, so it fits the GSO limit too.
                    b.len += transmit.size;
                    b.count += 1;
                } else {
                    // Another destination or a longer datagram: it starts a batch of its own.
                    let mut data = out.spare.pop().unwrap_or_else(|| vec![0; BATCH_BUF]);
                    data[..transmit.size].copy_from_slice(&b.data[start..start + transmit.size]);
                    out.batches.push_back(Batch { destination, data, len: transmit.size, segment: transmit.size, count: 1 });
                }
            }
            None => {
                let mut data = out.buffer();
                let Some((destination, transmit)) = st.proto.poll_transmit(now, &mut data[..max_datagram]) else {
                    out.spare.push(data);
                    return;
                };
                out.batches.push_back(Batch { destination, data, len: transmit.size, segment: transmit.size, count: 1 });
            }
        }
    }
}

async fn send(shared: &Shared, socket: &mut DriverSocket, batch: &Batch) -> io::Result<()> {
    let transmit = batch.transmit();
    loop {
        let Some(registered) = &socket.registered else {
            match try_send(shared, socket.socket(), None, &transmit) {
                // A full socket buffer: the wait for room needs the registration back
                // (until the driver next looks whether a reader watches).
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => socket.listen(true)?,
                sent => return sent,
            }
            continue;
        };
        match registered.try_io(Interest::WRITABLE, |s| try_send(shared, s, None, &transmit)) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => drop(registered.writable().await?),
            Err(e) => return Err(e),
        }
    }
}

/// Moves the core's events to the tasks waiting on them, and forgets connections
/// that are finished and no longer held. Only connections with news are visited.
pub(crate) fn dispatch(st: &mut State, closing: &mut WakerSet) {
    while let Some((handle, event)) = st.proto.poll_event() {
        let Some(w) = st.waiters.get_mut(&handle) else { continue };
        match event {
            Event::Connected => w.connected.wake(),
            Event::Readable | Event::StreamFinished => w.read.wake(),
            Event::Writable => w.write.wake(),
            Event::Closed => {
                w.read.wake();
                closing.take_from(&mut w.closed);
            }
            Event::ConnectionLost(_) => w.wake_all(),
        }
    }
    while let Some(handle) = st.proto.poll_drained() {
        match st.waiters.get_mut(&handle) {
            Some(w) if !w.released => w.drained = true, // forgotten when the application lets go
            _ => forget(st, handle),
        }
    }
}

/// Forgets a finished connection nobody holds. Out of line, as in [`accept_incoming`]:
/// removing a connection moves kilobytes, and [`dispatch`] runs every turn.
#[cold]
#[inline(never)]
fn forget(st: &mut State, handle: fencepost_proto::ConnectionHandle) {
    st.proto.remove(handle);
    st.waiters.remove(&handle);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DriverPlacement, Endpoint, EndpointConfig};
    use fencepost_proto::TransportConfig;

    #[test]
    fn memory_given_back_is_returned_once_plenty_or_once_it_stops_coming() {
        let ms = |n: u64| fencepost_proto::Instant::ZERO + fencepost_proto::Duration::from_millis(n);
        let mb = |n: usize| n << 20;
        // Too little to be worth a trim, however long it waits.
        assert_eq!(memory_return_due(RETURN_MEMORY_LEAST - 1, ms(0), None, ms(60_000)), Err(None));
        // A little: once a second has passed with no more given back.
        assert_eq!(memory_return_due(mb(2), ms(100), None, ms(500)), Err(Some(ms(1_100))));
        assert_eq!(memory_return_due(mb(2), ms(100), None, ms(1_100)), Ok(()));
        // Plenty: at once, however recent the last of it ...
        assert_eq!(memory_return_due(mb(20), ms(500), None, ms(500)), Ok(()));
        // ... but never twice within a second.
        assert_eq!(memory_return_due(mb(20), ms(500), Some(ms(300)), ms(500)), Err(Some(ms(1_300))));
        assert_eq!(memory_return_due(mb(2), ms(0), Some(ms(1_800)), ms(2_000)), Err(Some(ms(2_800))));
        assert_eq!(memory_return_due(mb(2), ms(0), Some(ms(1_800)), ms(2_800)), Ok(()));
    }

    const INITIAL: [u8; 26] = [1, 1, 0, 0, 0, 0, 1, 0xa, 0xb, 0xc, 0xd, 0, 0, 0, 0x64, 0, 0, 0, 0, 0x05, 0xb4, 0, 0, 4, 0, 0x84];
    /// A version 1 data packet (`docs/protocol.md`'s test vector) to connection id 0x11223344.
    const DATA: [u8; 19] = [1, 2, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 7, 0, 0, 3, 0xe8, b'h', b'e', b'l', b'l', b'o'];

    /// `count` version 1 handshake Initials from as many clients of one address (the
    /// Initial of `docs/protocol.md`'s test vectors, each with its own connection id), as
    /// GRO's one buffer, then `data` data packets for a connection nobody has as a second
    /// buffer, the first time `recv` is called; the socket is empty after.
    fn initials_then_data_once(first_cid: u32, count: usize, data: usize, calls: &std::cell::Cell<usize>) -> impl FnMut(&mut [IoSliceMut<'_>], &mut [RecvMeta]) -> io::Result<usize> + '_ {
        move |iovs, metas| {
            calls.set(calls.get() + 1);
            if calls.get() > 1 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            for (i, datagram) in iovs[0].chunks_mut(INITIAL.len()).take(count).enumerate() {
                datagram.copy_from_slice(&INITIAL);
                datagram[7..11].copy_from_slice(&(first_cid + i as u32).to_be_bytes());
            }
            metas[0].addr = "127.0.0.1:9".parse().unwrap();
            metas[0].len = INITIAL.len() * count;
            metas[0].stride = INITIAL.len();
            if data == 0 {
                return Ok(1);
            }
            for datagram in iovs[1].chunks_mut(DATA.len()).take(data) {
                datagram.copy_from_slice(&DATA);
            }
            metas[1].addr = "127.0.0.1:9".parse().unwrap();
            metas[1].len = DATA.len() * data;
            metas[1].stride = DATA.len();
            Ok(2)
        }
    }

    fn initials_once(first_cid: u32, count: usize, calls: &std::cell::Cell<usize>) -> impl FnMut(&mut [IoSliceMut<'_>], &mut [RecvMeta]) -> io::Result<usize> + '_ {
        initials_then_data_once(first_cid, count, 0, calls)
    }

    /// A plaintext server endpoint whose driver is a task of the test's current-thread
    /// runtime: nothing in the tests awaits, so the driver never runs and their receives
    /// are the endpoint's only ones.
    async fn plaintext_server() -> Endpoint {
        let config = EndpointConfig { driver: DriverPlacement::Task, ..EndpointConfig::server(TransportConfig::default_profile().insecure()) };
        Endpoint::bind("127.0.0.1:0".parse().unwrap(), config).await.unwrap()
    }

    #[tokio::test]
    async fn a_pass_takes_its_handshakes_and_the_other_initials_wait_for_the_next() {
        let endpoint = plaintext_server().await;
        let shared = &endpoint.shared;
        let received = || endpoint.stats().datagrams_received;
        let mut inbox = Inbox::new();
        let calls = std::cell::Cell::new(0);
        let bound = Some(HANDSHAKES_PER_PASS);
        let mut recv = initials_once(1, 20, &calls);
        // The first pass reads the 20 and hands over 8, the rest wait; it reads on and
        // finds the socket empty; the caller may transmit.
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, bound, &mut recv).unwrap());
        assert_eq!((received(), calls.get()), (8, 2));
        assert_eq!(shared.receiving.lock().unwrap().initials.len(), 12);
        // The next hands over 8 more of those before reading again ...
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, bound, &mut recv).unwrap());
        assert_eq!((received(), calls.get()), (16, 3));
        // ... and the last 4.
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, bound, &mut recv).unwrap());
        assert_eq!((received(), calls.get()), (20, 4));
        assert!(shared.receiving.lock().unwrap().is_empty());

        // Without a bound (a reader's receive) the pass takes them all.
        let calls = std::cell::Cell::new(0);
        let mut recv = initials_once(101, 20, &calls);
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, None, &mut recv).unwrap());
        assert_eq!((received(), calls.get()), (40, 2));
        // Initials left waiting by a bounded pass go to whoever receives next, bounded or not.
        let calls = std::cell::Cell::new(0);
        let mut recv = initials_once(201, 20, &calls);
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, bound, &mut recv).unwrap());
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, None, &mut recv).unwrap());
        assert_eq!((received(), calls.get()), (60, 3));
        // Each made its connection: none was lost or handed over twice.
        assert_eq!(shared.lock().proto.len(), 60);

        // Handshakes that cost nothing (not valid ones) do not end a pass.
        let calls = std::cell::Cell::new(0);
        let mut recv = initials_once(301, 20, &calls);
        let mut garbled = move |iovs: &mut [IoSliceMut<'_>], metas: &mut [RecvMeta]| {
            let n = recv(iovs, metas)?;
            for datagram in iovs[0].chunks_mut(26).take(20) {
                datagram[6] = 9; // no such phase
            }
            Ok(n)
        };
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, bound, &mut garbled).unwrap());
        assert_eq!((received(), calls.get()), (80, 2));
    }

    #[tokio::test]
    async fn what_came_behind_waiting_initials_goes_on_and_a_flood_is_shed() {
        let endpoint = plaintext_server().await;
        let shared = &endpoint.shared;
        let mut inbox = Inbox::new();
        let bound = Some(HANDSHAKES_PER_PASS);
        // 20 Initials, then 5 datagrams for a connection: the 5 reach the core in the first
        // pass, with the first 8 Initials; 12 Initials wait.
        let calls = std::cell::Cell::new(0);
        let mut recv = initials_then_data_once(1, 20, 5, &calls);
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, bound, &mut recv).unwrap());
        let stats = endpoint.stats();
        assert_eq!((stats.datagrams_received, stats.unknown_connection), (13, 5));
        assert_eq!(shared.lock().proto.len(), 8);
        assert_eq!(shared.receiving.lock().unwrap().initials.len(), 12);
        // They are not forgotten: two more passes make their connections.
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, bound, &mut recv).unwrap());
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, bound, &mut recv).unwrap());
        assert_eq!(shared.lock().proto.len(), 20);
        assert!(shared.receiving.lock().unwrap().is_empty());

        // More Initials than are kept waiting: the newest beyond are dropped and counted.
        let flood = 8 + WAITING_INITIALS + 68;
        let calls = std::cell::Cell::new(0);
        let mut recv = initials_then_data_once(1001, flood, 3, &calls);
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, bound, &mut recv).unwrap());
        let stats = endpoint.stats();
        assert_eq!(stats.initials_shed, 68);
        assert_eq!(stats.unknown_connection, 5 + 3);
        assert_eq!(shared.receiving.lock().unwrap().initials.len(), WAITING_INITIALS);
        assert_eq!(stats.datagrams_received, 25 + 8 + 68 + 3);
        // The ones kept are the oldest, in the order they came; the next pass takes 8.
        let src_cid = |d: &Vec<u8>| u32::from_be_bytes(d[7..11].try_into().unwrap());
        {
            let backlog = shared.receiving.lock().unwrap();
            assert_eq!(src_cid(&backlog.initials.front().unwrap().1), 1001 + 8);
            assert_eq!(src_cid(&backlog.initials.back().unwrap().1), 1001 + 8 + WAITING_INITIALS as u32 - 1);
        }
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, bound, &mut recv).unwrap());
        assert_eq!(shared.lock().proto.len(), 20 + 16);
        assert_eq!(src_cid(&shared.receiving.lock().unwrap().initials.front().unwrap().1), 1001 + 16);
    }

    /// Receive buffers, each `count` copies of one datagram, as many per call as the call
    /// offers buffers; the socket is empty after the last.
    fn buffers_in_turn(buffers: Vec<(Vec<u8>, usize)>, calls: &std::cell::Cell<usize>) -> impl FnMut(&mut [IoSliceMut<'_>], &mut [RecvMeta]) -> io::Result<usize> + '_ {
        let mut left = std::collections::VecDeque::from(buffers);
        move |iovs, metas| {
            calls.set(calls.get() + 1);
            let mut filled = 0;
            while filled < iovs.len() {
                let Some((datagram, count)) = left.pop_front() else { break };
                for slot in iovs[filled].chunks_mut(datagram.len()).take(count) {
                    slot.copy_from_slice(&datagram);
                }
                metas[filled].addr = "127.0.0.1:9".parse().unwrap();
                metas[filled].len = datagram.len() * count;
                metas[filled].stride = datagram.len();
                filled += 1;
            }
            if filled == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(filled)
        }
    }

    #[tokio::test]
    async fn once_it_had_its_handshakes_a_pass_ends_before_a_handshake_packet_to_a_connection() {
        let endpoint = plaintext_server().await;
        let shared = &endpoint.shared;
        let mut inbox = Inbox::new();
        // A handshake packet to connection 0x55667788 (a client's Accept, say): what came
        // after it may need the keys it brings, so it is not passed.
        let mut to_connection = INITIAL.to_vec();
        to_connection[2..6].copy_from_slice(&0x5566_7788u32.to_be_bytes());
        let calls = std::cell::Cell::new(0);
        // Eight Initials (all to one client id: the first makes its connection, the rest
        // are its repeats, each a handshake packet) fill the pass's handshakes.
        let mut recv = buffers_in_turn(vec![(INITIAL.to_vec(), 8), (DATA.to_vec(), 2), (to_connection, 1), (DATA.to_vec(), 3)], &calls);
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, Some(HANDSHAKES_PER_PASS), &mut recv).unwrap());
        let stats = endpoint.stats();
        assert_eq!((stats.datagrams_received, stats.unknown_connection), (10, 2));
        assert_eq!(shared.receiving.lock().unwrap().runs.len(), 2);
        // The next pass hands it over first, then what came after it, in order.
        assert!(receive(shared, &mut inbox, RECV_ROUNDS, 1, Some(HANDSHAKES_PER_PASS), &mut recv).unwrap());
        let stats = endpoint.stats();
        assert_eq!((stats.datagrams_received, stats.unknown_connection), (14, 6));
        assert!(shared.receiving.lock().unwrap().is_empty());
        assert_eq!(calls.get(), 3);
    }
}

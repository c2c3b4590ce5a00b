//! fencepost-net: the sliding-fence transport over real UDP sockets (tokio).
//!
//! An [`Endpoint`] owns one UDP socket and serves many connections, told apart
//! by connection id. A driver, on a thread of its own, moves datagrams between the socket and the
//! sans-IO core (batched with recvmmsg/GRO and GSO where the kernel has them,
//! through `quinn-udp`) and runs the core's timers. [`Connection`] is a byte
//! stream implementing `AsyncRead` and `AsyncWrite`. [`blocking`] has the same endpoint
//! without a driver: blocking calls that run the transport on the caller's thread.

pub mod blocking;
mod driver;
mod path;
mod sockio;
#[cfg(target_os = "linux")]
mod uring;
pub mod tools;

use fencepost_proto::{
    ConnectionError, ConnectionHandle, ConnectionStats, Endpoint as ProtoEndpoint, EndpointConfig as ProtoEndpointConfig,
    EndpointStats, ReadError, TransportConfig, WriteError,
};
pub use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// tokio's timers fire on millisecond ticks, rounded up: the pacer is told so (see
/// `TransportConfig::timer_granularity`).
const TIMER_GRANULARITY: fencepost_proto::Duration = fencepost_proto::Duration::from_millis(1);

/// What a privileged endpoint asks for its receive queue, beyond `net.core.rmem_max`.
/// One server receiving from a hundred senders at once gets their slow starts together:
/// at 4 Gbit/s the default cap (8 MB counted as the kernel counts it) is 16 ms of
/// arrivals, and what overflows it is lost before the transport sees it.
const RECV_BUFFER_FORCED: usize = 64 << 20;

/// Raises the socket's receive buffer past the system cap where the process may (root,
/// CAP_NET_ADMIN); elsewhere the cap stands and this does nothing.
fn force_recv_buffer(socket: &std::net::UdpSocket, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let value = bytes.min(i32::MAX as usize) as libc::c_int;
        // SAFETY: a plain setsockopt on a socket we own, with a c_int value of the right size.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (socket, bytes);
}

/// The receive buffer (as the kernel counts it, twice what is asked) a socket has when
/// the system lets the endpoint's request of 8 MB through. Below it, and far below on a
/// stock system (`net.core.rmem_max` 208 kB, a 416 kB buffer), a host busy elsewhere for
/// a fraction of a millisecond overflows it at a few Gbit/s, and the datagrams the kernel
/// drops read to the senders as loss: without root (no `SO_RCVBUFFORCE`), one loopback
/// connection at 12-15 Gbit/s resent 12-15 % of its packets with 208 kB, and 100
/// connections 4-10 % with 4 MB, where none were resent with root's 64 MB. (That was
/// before windows were held to what the socket holds once it overflows, see the driver's
/// `OverflowWatch`: fewer are resent now, at some cost in rate with 208 kB.)
pub const RECEIVE_BUFFER_WANTED: usize = 16 << 20;

/// The socket's receive buffer as the kernel counts it (`SO_RCVBUF`), if it says.
fn receive_buffer_of(socket: &std::net::UdpSocket) -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a plain getsockopt into a c_int of the size passed, on a socket we own.
        let rc = unsafe { libc::getsockopt(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, (&mut value as *mut libc::c_int).cast(), &mut len) };
        (rc == 0).then_some(value.max(0) as usize)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = socket;
        None
    }
}

/// Datagrams the kernel dropped at this socket since it was opened (`SO_MEMINFO`'s
/// `SK_MEMINFO_DROPS`: a full receive buffer, mostly), if it says.
pub(crate) fn receive_drops_of(socket: &std::net::UdpSocket) -> Option<u64> {
    receive_memory_of(socket).map(|m| m.drops)
}

/// What `SO_MEMINFO` says of a socket's receive side.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReceiveMemory {
    /// Datagrams dropped since the socket was opened (`SK_MEMINFO_DROPS`).
    pub(crate) drops: u64,
    /// Memory charged to the receive queue (`SK_MEMINFO_RMEM_ALLOC`), which the kernel
    /// compares with the buffer (as `SO_RCVBUF` reads it) to drop: the datagrams queued,
    /// with their overhead, and for UDP up to a quarter of the buffer already read and not
    /// yet given back (released in batches while the queue is not empty).
    pub(crate) charged: u64,
}

/// The socket's receive memory and drops, if the system says (Linux).
pub(crate) fn receive_memory_of(socket: &std::net::UdpSocket) -> Option<ReceiveMemory> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // From asm-generic/socket.h (x86, ARM and most others use the generic numbers).
        const SO_MEMINFO: libc::c_int = 55;
        const SK_MEMINFO_VARS: usize = 9;
        let mut info = [0u32; SK_MEMINFO_VARS];
        let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `info`, which holds that many.
        let rc = unsafe { libc::getsockopt(socket.as_raw_fd(), libc::SOL_SOCKET, SO_MEMINFO, info.as_mut_ptr().cast(), &mut len) };
        let drops = libc::SK_MEMINFO_DROPS as usize;
        let charged = libc::SK_MEMINFO_RMEM_ALLOC as usize;
        (rc == 0 && (len as usize) > drops * 4).then(|| ReceiveMemory { drops: u64::from(info[drops]), charged: u64::from(info[charged]) })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = socket;
        None
    }
}

/// Turns off the per-datagram destination address and traffic class that quinn-udp asks
/// the kernel for: the transport uses neither (it replies from the socket's address and
/// sends no ECN), and writing them into every receive's control buffer took about 0.4 µs
/// of each round trip of a loopback ping-pong. GRO's segment size still comes.
fn drop_unused_receive_info(socket: &std::net::UdpSocket) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let off: libc::c_int = 0;
        for (level, name) in [
            (libc::IPPROTO_IP, libc::IP_PKTINFO),
            (libc::IPPROTO_IP, libc::IP_RECVTOS),
            (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO),
            (libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS),
        ] {
            // SAFETY: a plain setsockopt on a socket we own, with a c_int value of the right
            // size; an option the socket's family lacks fails harmlessly.
            unsafe {
                libc::setsockopt(socket.as_raw_fd(), level, name, (&off as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = socket;
}

/// How an endpoint is set up.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    pub transport: TransportConfig,
    /// Accept connections opened by peers.
    pub server: bool,
    /// Give up on a handshake after this long.
    pub connect_timeout: Duration,
    pub max_connections: usize,
    /// Bytes of received data all connections together may hold (see `fencepost_proto::EndpointConfig`).
    pub buffer_budget: usize,
    /// Where the endpoint's I/O (receiving, timers, acks) runs.
    pub driver: DriverPlacement,
}

/// Where an endpoint's driver (its socket, timers and acks) runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DriverPlacement {
    /// On a thread of its own, which the OS schedules beside the application's: however
    /// long the application's tasks run without yielding, acks go out and timers fire.
    /// A received packet wakes two threads on its way to the application (the driver,
    /// then the reading task's), except in a request/reply exchange on the endpoint's only
    /// connection, where a waiting reader receives for itself and the driver's thread
    /// leaves it the socket (see [`Endpoint::reader_receives`], [`READER_WATCH`]).
    #[default]
    Thread,
    /// As a task on the tokio runtime that binds the endpoint (which needs its I/O and
    /// timers enabled, `Builder::enable_all`): a received packet wakes one thread. (In a
    /// request-response exchange the default now does as well; on a two-worker runtime it
    /// did better, 2026-11-27.) The application's tasks share that runtime
    /// with the driver: a task that runs long without reaching an `.await` that waits
    /// (copying megabytes into a send buffer, hashing) delays every connection's acks and
    /// timers while it runs, which a peer can see as loss. The driver, for its part, lets
    /// the other tasks run after each of its turns, busy or not.
    Task,
}

impl EndpointConfig {
    pub fn client(transport: TransportConfig) -> Self {
        EndpointConfig {
            transport,
            server: false,
            connect_timeout: Duration::from_secs(10),
            max_connections: 65_536,
            buffer_budget: 1 << 30,
            driver: DriverPlacement::Thread,
        }
    }
    pub fn server(transport: TransportConfig) -> Self {
        EndpointConfig { server: true, ..Self::client(transport) }
    }
}

/// Errors of the socket API, with messages a user can act on.
#[derive(Debug)]
pub enum NetError {
    /// The local address could not be bound (in use, not ours, no permission).
    Bind { addr: SocketAddr, source: io::Error },
    /// No handshake answer from the peer in time.
    ConnectTimeout { addr: SocketAddr, after: Duration, hint: &'static str },
    /// The connection ended with an error (idle timeout, reset).
    ConnectionLost { addr: SocketAddr, error: ConnectionError },
    /// The endpoint stopped (closed, or its socket failed).
    EndpointClosed(String),
    Io(io::Error),
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetError::Bind { addr, source } if source.kind() == io::ErrorKind::AddrInUse => {
                write!(f, "cannot listen on {addr}: the port is already in use")
            }
            NetError::Bind { addr, source } => write!(f, "cannot bind {addr}: {source}"),
            NetError::ConnectTimeout { addr, after, hint } => {
                write!(f, "connecting to {addr} timed out after {:.1} s: no answer to the handshake{hint}", after.as_secs_f64())
            }
            NetError::ConnectionLost { addr, error: ConnectionError::Unreachable(why) } => {
                write!(f, "connecting to {addr} failed: {why}")
            }
            NetError::ConnectionLost { addr, error } => write!(f, "connection to {addr} lost: {error}"),
            NetError::EndpointClosed(why) => write!(f, "endpoint closed: {why}"),
            NetError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for NetError {}

impl From<NetError> for io::Error {
    fn from(e: NetError) -> io::Error {
        let kind = match &e {
            NetError::Bind { source, .. } => source.kind(),
            NetError::ConnectTimeout { .. } => io::ErrorKind::TimedOut,
            NetError::ConnectionLost { error: ConnectionError::TimedOut { .. }, .. } => io::ErrorKind::TimedOut,
            NetError::ConnectionLost { error: ConnectionError::Unreachable(_), .. } => io::ErrorKind::ConnectionRefused,
            NetError::ConnectionLost { .. } => io::ErrorKind::ConnectionReset,
            NetError::EndpointClosed(_) => io::ErrorKind::NotConnected,
            NetError::Io(e) => e.kind(),
        };
        io::Error::new(kind, e)
    }
}

/// What a client that got no answer to its handshake should check: silence is all a
/// protected server gives a client it cannot authenticate to.
fn connect_hint(config: &EndpointConfig) -> &'static str {
    match config.transport.protection.noise() {
        None => " (is the server plaintext too? a protected server ignores --insecure clients)",
        Some(n) if n.peer.is_some() => " (is the server there, and is --peer-key its key? a server ignores a handshake for another key)",
        Some(_) => " (is the server there, and protected too? a plaintext server ignores protected clients)",
    }
}

/// Tasks waiting for one thing. Several may (two threads writing to one socket, a
/// reader and a closer): each is woken, so none is left waiting for a wake-up another took.
#[derive(Default)]
pub(crate) struct WakerSet(Vec<Waker>);

impl WakerSet {
    fn register(&mut self, waker: &Waker) {
        if !self.0.iter().any(|w| w.will_wake(waker)) {
            self.0.push(waker.clone());
        }
    }
    pub(crate) fn wake(&mut self) {
        for w in self.0.drain(..) {
            w.wake();
        }
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Drops the registration of the task `waker` wakes (it is about to do what it waited for).
    fn forget(&mut self, waker: &Waker) {
        self.0.retain(|w| !w.will_wake(waker));
    }
    /// Moves `other`'s tasks here, to be woken later.
    pub(crate) fn take_from(&mut self, other: &mut WakerSet) {
        for w in other.0.drain(..) {
            if !self.0.iter().any(|have| have.will_wake(&w)) {
                self.0.push(w);
            }
        }
    }
}

/// Who waits on a connection.
#[derive(Default)]
struct Waiters {
    read: WakerSet,
    write: WakerSet,
    connected: WakerSet,
    closed: WakerSet,
    /// The driver's turn (see `State::turns_taken`) by whose send the closed connection's
    /// last ack was on the wire, once `closed()` saw that the core owed none.
    flush_after: Option<u64>,
    /// The application dropped its handle: remove the connection once it is done.
    released: bool,
    /// The connection is done (drained); remove it once the application lets go.
    drained: bool,
}

impl Waiters {
    fn wake_all(&mut self) {
        self.read.wake();
        self.write.wake();
        self.connected.wake();
        self.closed.wake();
    }
}

struct State {
    proto: ProtoEndpoint<SocketAddr>,
    waiters: HashMap<ConnectionHandle, Waiters>,
    accept_queue: VecDeque<ConnectionHandle>,
    accept_waiter: WakerSet,
    /// Set when the endpoint stops; every later operation fails with it.
    stopped: Option<String>,
    /// Stateless answers (refusals) waiting to be sent: (destination, datagram).
    responses: Vec<(SocketAddr, Vec<u8>)>,
    /// The deadline the driver sleeps until (`None`: nothing scheduled), so that a send from
    /// another thread knows whether it moved a timer earlier than the driver will look.
    driver_deadline: Option<fencepost_proto::Instant>,
    /// Room for one datagram built on an application's thread.
    inline_scratch: Vec<u8>,
    /// The driver holds datagrams taken from the core and not yet on the wire: a send from
    /// another thread now could overtake them (and reordering looks like loss to the peer).
    driver_sending: bool,
    /// Turns the driver has taken from the core, and the last of them whose datagrams are
    /// all sent: what the core no longer holds is on the wire once `turns_sent` reaches the
    /// count taken when it left the core.
    turns_taken: u64,
    turns_sent: u64,
    /// Tests: the driver reports itself sending at every moment, as a driver kept busy by
    /// other connections may (which a test cannot bring about reliably).
    #[cfg(test)]
    always_sending: bool,
    /// Closed connections whose application waits in `closed()` for the last ack to leave:
    /// the driver wakes it once it has sent what it holds.
    flush_waits: Vec<ConnectionHandle>,
    /// Waiters in `closed()` whose connection closed in a receive a reader made: the driver
    /// wakes them with its own, once what it holds is sent.
    closing_after_send: WakerSet,
    /// When the allocator was last asked to return the memory quiet connections gave back
    /// to the system, and the amount given back since as last seen with the time it
    /// changed (see `driver::return_memory`).
    memory_returned_at: Option<fencepost_proto::Instant>,
    /// When the driver last read the socket's error queue (see `driver::take_unreachable`).
    errors_read_at: fencepost_proto::Instant,
    memory_pending: (usize, fencepost_proto::Instant),
    /// What the route to each peer carries, to fit new connections' packets to it.
    routes: path::KnownRoutes,
}

impl State {
    /// Whether the driver holds datagrams not yet on the wire (see `driver_sending`).
    fn set_driver_sending(&mut self, sending: bool) {
        self.driver_sending = sending;
        #[cfg(test)]
        {
            self.driver_sending |= self.always_sending;
        }
    }
}

impl State {
    /// The application let go of a connection: it closes gracefully (a FIN after what was
    /// written), and is forgotten once it is done, now if it already is.
    fn release(&mut self, handle: ConnectionHandle, now: fencepost_proto::Instant) {
        if let Some(conn) = self.proto.connection_mut(handle) {
            conn.close(now);
        }
        let drained = match self.waiters.get_mut(&handle) {
            Some(w) => {
                w.released = true;
                w.drained
            }
            None => false,
        };
        if drained {
            self.proto.remove(handle);
            self.waiters.remove(&handle);
        }
    }
}

struct Shared {
    udp: quinn_udp::UdpSocketState,
    /// The endpoint's socket (a second descriptor for it) for sends from the application's
    /// threads: a write to an idle connection sends its first packets at once (see `send_inline`).
    inline_socket: std::net::UdpSocket,
    state: Mutex<State>,
    /// Held from a receive call to the delivery of what it read: the driver and a reader
    /// (see `receive_for_reader`) both receive, and a batch delivered after a later one
    /// would look to the core like reordering, which loss detection takes for loss. It
    /// holds what a receive read and did not deliver (see `driver::Backlog`).
    receiving: Mutex<driver::Backlog>,
    /// A reader's own watch on the socket, in the runtime the reader runs on, and its
    /// receive buffers (see `receive_for_reader`).
    reader: Mutex<ReaderWatch>,
    /// Receive calls a reader made that delivered datagrams (see `Endpoint::reader_receives`).
    reader_receives: std::sync::atomic::AtomicU64,
    /// When a reader last began waiting on the socket itself (the core's clock in µs, plus
    /// one; 0 for never): for [`READER_WATCH`] after it, the driver leaves the socket to it.
    reader_parked_at: std::sync::atomic::AtomicU64,
    /// Times the driver's wait ended (see `Endpoint::driver_wakeups`).
    driver_wakeups: std::sync::atomic::AtomicU64,
    /// A send or receive returned an ICMP error about an earlier datagram: the driver's
    /// next turn reads the socket's error queue (see `driver::take_unreachable`).
    icmp_pending: std::sync::atomic::AtomicBool,
    /// Destinations this host itself has no route to (a send to them failed with network
    /// or host unreachable), with the errno, for the driver's next turn (see
    /// `driver::take_unreachable`).
    unroutable: Mutex<Vec<(SocketAddr, i32)>>,
    wake_driver: tokio::sync::Notify,
    epoch: std::time::Instant,
    local_addr: SocketAddr,
    /// The socket's receive buffer as the kernel counts it, read after it was asked for.
    receive_buffer: Option<usize>,
    config: EndpointConfig,
}

/// How long after a reader began waiting on the socket itself (in a request/reply exchange,
/// see [`Endpoint::reader_receives`]) the driver leaves it the socket. It bounds how late
/// anything is that only the driver would have done, were the reader to stop reading: a
/// datagram waits at most this long unread, and the driver wakes at least this often while
/// a reader watches. No longer than the default `ack_coalesce`, so the ack a reader's
/// receive defers is due after the driver's next wake-up and needs no wake-up of its own.
pub const READER_WATCH: Duration = Duration::from_millis(1);

/// Receive calls one read may make for itself (see `Shared::receive_for_reader`); past
/// them it waits for the driver, which wakes it when its data is in.
const READER_RECEIVES_PER_POLL: u32 = 4;

/// What a reader needs to receive for the endpoint (see [`Shared::receive_for_reader`]).
struct ReaderReceive {
    socket: tokio::io::unix::AsyncFd<std::net::UdpSocket>,
    inbox: driver::Inbox,
}

enum ReaderWatch {
    /// No reader has waited yet (or the runtime of the last one is gone).
    Untried,
    Watching(ReaderReceive),
    /// The reader's runtime has no I/O (or there is none): readers leave receiving to the
    /// driver, and the attempt is not repeated on every read.
    Unavailable,
}

impl Shared {
    /// A reader that found nothing to read, on the only connection of an endpoint whose
    /// driver has a thread of its own, in a request/reply exchange, also waits for the
    /// socket itself, in its own runtime, and when woken does the driver's receive: a
    /// request then reaches the task that answers it in one thread wake-up instead of two
    /// (the driver's, then the reader's). Not in a transfer one way: there the reader's
    /// thread and the driver's took turns at the socket (20 % less rate on loopback).
    /// While it waits, and for [`READER_WATCH`] after, the driver does not wait on the
    /// socket (its thread woke for every request as well, to find it taken: the round
    /// trip's tail went to that wake-up); after a receive the reader does what the driver
    /// would have done at once (see [`Shared::settle_reader_receive`]). With many connections
    /// the driver's one receive serves them all. Returns whether datagrams were delivered
    /// (read again); otherwise `cx` is woken when more arrive.
    fn receive_for_reader(&self, cx: &mut Context<'_>, handle: ConnectionHandle) -> bool {
        let Ok(mut slot) = self.reader.try_lock() else { return false };
        if matches!(*slot, ReaderWatch::Untried) {
            *slot = self.reader_receive().map_or(ReaderWatch::Unavailable, ReaderWatch::Watching);
        }
        let ReaderWatch::Watching(ReaderReceive { socket, inbox }) = &mut *slot else { return false };
        loop {
            let mut ready = match socket.poll_read_ready(cx) {
                Poll::Ready(Ok(ready)) => ready,
                Poll::Ready(Err(_)) => {
                    // Its runtime is gone: the next reader watches from its own.
                    *slot = ReaderWatch::Untried;
                    return false;
                }
                Poll::Pending => {
                    self.reader_parked_at.store(self.now().total_micros() + 1, std::sync::atomic::Ordering::Relaxed);
                    return false;
                }
            };
            // Two buffers at least: a call that fills only one found the socket empty
            // behind it, and the readiness it saw is cleared here instead of by a
            // further call that would only fail (the next read would make it, one
            // system call per message). A datagram arriving since is a new event, which
            // sets the readiness again.
            let mut short = false;
            let received = driver::receive(self, inbox, 1, 2, None, |iovs, metas| {
                let offered = iovs.len();
                match ready.try_io(|s| self.udp.recv(s.get_ref().into(), iovs, metas)) {
                    Ok(result) => {
                        short = result.as_ref().is_ok_and(|&n| n < offered);
                        result
                    }
                    Err(_would_block) => Err(io::ErrorKind::WouldBlock.into()),
                }
            });
            if short {
                ready.clear_ready();
            }
            match received {
                // Empty (the driver took them): readiness is cleared, wait again.
                Ok(true) => continue,
                Ok(false) => {
                    self.reader_receives.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if self.settle_reader_receive(cx, handle) {
                        self.wake_driver.notify_one();
                    }
                    return true;
                }
                Err(_) => return false, // the driver meets the error and stops the endpoint
            }
        }
    }

    /// The driver's work after a receive that the reader made: the core's events go to the
    /// tasks waiting on them (not to the reader itself, which reads next), and what is due
    /// now leaves from this thread. Returns whether the driver must still look: something
    /// is left to send (the core's, or a stateless response the receive made: a retry, a
    /// refusal, a reset), a timer falls before the driver's next wake-up, or a
    /// connection closed (its waiters are woken once its last ack is on the wire, which
    /// the driver sees to).
    fn settle_reader_receive(&self, cx: &Context<'_>, handle: ConnectionHandle) -> bool {
        let mut st = self.lock();
        if let Some(w) = st.waiters.get_mut(&handle) {
            w.read.forget(cx.waker());
        }
        let mut closing = WakerSet::default();
        driver::dispatch(&mut st, &mut closing);
        let closed = !closing.is_empty();
        if closed {
            st.closing_after_send.take_from(&mut closing);
        }
        self.send_inline(&mut st) || closed || !st.responses.is_empty()
    }

    /// Until when the driver leaves the socket to a reader that waits on it (see
    /// [`READER_WATCH`]), if one does. (The clock is read only if a reader ever waited:
    /// never in a one-way transfer, where this runs every driver turn.)
    fn reader_watches_until(&self) -> Option<fencepost_proto::Instant> {
        let parked = self.reader_parked_at.load(std::sync::atomic::Ordering::Relaxed).checked_sub(1)?;
        let until = fencepost_proto::Instant::from_micros(parked + READER_WATCH.as_micros() as u64);
        (until > self.now()).then_some(until)
    }

    /// The reader's watch on the socket, in the current runtime if it has I/O enabled.
    fn reader_receive(&self) -> Option<ReaderReceive> {
        tokio::runtime::Handle::try_current().ok()?;
        let socket = self.inline_socket.try_clone().ok()?;
        // Without I/O enabled tokio panics rather than refusing (its message is printed, once
        // per endpoint: `ReaderWatch::Unavailable` keeps it from being tried again).
        // SAFETY: the `UdpSocket` owns its descriptor, which stays open and the same while
        // the `AsyncFd` holds it (nothing else has it: it is a fresh duplicate).
        let watch = std::panic::catch_unwind(move || unsafe { tokio::io::unix::AsyncFd::register_with_interest(socket, tokio::io::Interest::READABLE) });
        Some(ReaderReceive { socket: watch.ok()?.ok()?, inbox: driver::Inbox::new() })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug; keep serving the other connections.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn now(&self) -> fencepost_proto::Instant {
        fencepost_proto::Instant::from_micros(self.epoch.elapsed().as_micros() as u64)
    }

    /// Makes a client connection to `addr` and waiters for it, its Initial written outside
    /// the lock (see `fencepost_proto::Endpoint::prepare_connect`): tasks connecting at once
    /// then do that work side by side, and the driver is not kept from the socket meanwhile.
    fn open_connection(&self, addr: SocketAddr) -> Result<fencepost_proto::ConnectionHandle, NetError> {
        let pending = {
            let mut st = self.lock();
            if let Some(why) = &st.stopped {
                return Err(NetError::EndpointClosed(why.clone()));
            }
            let mut pending = st.proto.prepare_connect();
            if let Some(route) = st.routes.route_to(addr) {
                pending.fit_route(route);
            }
            pending
        };
        let opened = pending.open(self.now());
        let mut st = self.lock();
        // Stopped in between: no driver would ever send the Initial.
        if let Some(why) = &st.stopped {
            return Err(NetError::EndpointClosed(why.clone()));
        }
        let handle = st.proto.finish_connect(opened, addr);
        st.waiters.insert(handle, Waiters::default());
        Ok(handle)
    }

    /// The core's instant `t` on the system's clock.
    fn instant(&self, t: fencepost_proto::Instant) -> std::time::Instant {
        self.epoch + Duration::from_micros(t.total_micros())
    }

    /// Binds `addr` and builds the endpoint's state (no driver yet); returns the socket the
    /// driver is to read.
    fn bind(addr: SocketAddr, config: EndpointConfig) -> Result<(Arc<Shared>, std::net::UdpSocket), NetError> {
        if matches!(&config.transport.protection, fencepost_proto::ProtectionConfig::Noise(noise) if noise.model_aead) {
            // A simulator's shortcut: on a socket it would send everything in clear, unauthenticated.
            let why = "NoiseConfig::model_aead is for simulations only: its packets are neither encrypted nor authenticated";
            return Err(NetError::Io(io::Error::new(io::ErrorKind::InvalidInput, why)));
        }
        let std_socket = std::net::UdpSocket::bind(addr).map_err(|source| NetError::Bind { addr, source })?;
        std_socket.set_nonblocking(true).map_err(NetError::Io)?;
        let udp = quinn_udp::UdpSocketState::new((&std_socket).into()).map_err(NetError::Io)?;
        // Bulk transfers arrive in bursts; room in the kernel queues spares drops on loopback.
        let _ = udp.set_recv_buffer_size((&std_socket).into(), 8 << 20);
        let _ = udp.set_send_buffer_size((&std_socket).into(), 8 << 20);
        force_recv_buffer(&std_socket, RECV_BUFFER_FORCED);
        let receive_buffer = receive_buffer_of(&std_socket);
        drop_unused_receive_info(&std_socket);
        sockio::report_icmp_errors(&std_socket, addr.is_ipv6());
        path::allow_fragmentation(&std_socket, addr.is_ipv6());
        let local_addr = std_socket.local_addr().map_err(NetError::Io)?;
        let inline_socket = std_socket.try_clone().map_err(NetError::Io)?;
        let mut transport = config.transport.clone();
        transport.timer_granularity = transport.timer_granularity.max(TIMER_GRANULARITY);
        let proto_config = ProtoEndpointConfig {
            transport: Arc::new(transport),
            accept_incoming: config.server,
            max_connections: config.max_connections,
            buffer_budget: config.buffer_budget,
        };
        // Connection ids, ephemeral keys and the endpoint's secrets all grow from these bytes.
        let mut entropy = [0u8; 32];
        getrandom::fill(&mut entropy).map_err(|e| NetError::Io(io::Error::other(format!("the OS's random source failed: {e}"))))?;
        let shared = Arc::new(Shared {
            udp,
            inline_socket,
            state: Mutex::new(State {
                proto: ProtoEndpoint::with_entropy(proto_config, entropy),
                waiters: HashMap::new(),
                accept_queue: VecDeque::new(),
                accept_waiter: WakerSet::default(),
                stopped: None,
                responses: Vec::new(),
                driver_deadline: None,
                inline_scratch: vec![0u8; 65_536],
                driver_sending: false,
                turns_taken: 0,
                turns_sent: 0,
                #[cfg(test)]
                always_sending: false,
                flush_waits: Vec::new(),
                closing_after_send: WakerSet::default(),
                memory_returned_at: None,
                errors_read_at: fencepost_proto::Instant::ZERO,
                memory_pending: (0, fencepost_proto::Instant::ZERO),
                routes: path::KnownRoutes::default(),
            }),
            receiving: Mutex::new(driver::Backlog::default()),
            reader: Mutex::new(ReaderWatch::Untried),
            reader_receives: std::sync::atomic::AtomicU64::new(0),
            reader_parked_at: std::sync::atomic::AtomicU64::new(0),
            driver_wakeups: std::sync::atomic::AtomicU64::new(0),
            icmp_pending: std::sync::atomic::AtomicBool::new(false),
            unroutable: Mutex::new(Vec::new()),
            wake_driver: tokio::sync::Notify::new(),
            epoch: std::time::Instant::now(),
            local_addr,
            receive_buffer,
            config,
        });
        Ok((shared, std_socket))
    }

    /// Sends what is due now, up to [`INLINE_DATAGRAMS`] datagrams, from the calling thread:
    /// a request written to an idle connection leaves without waiting for the driver's
    /// thread to wake (a round trip of small messages crossed four thread hand-offs where
    /// TCP has two). Returns whether the driver must still look: more is due, a datagram
    /// could not be sent here, or a timer now falls before the one it sleeps until.
    fn send_inline(&self, st: &mut State) -> bool {
        if st.driver_sending {
            return true;
        }
        let now = self.now();
        // The driver's kind of batch, in the scratch buffer: datagrams to one destination
        // sent in one system call (GSO), so a reply and the ack behind it reach the peer
        // together. (Its destination means nothing while it holds none.)
        let data = std::mem::take(&mut st.inline_scratch);
        // Room for each datagram: the largest the core writes, and never less than a handshake's.
        let room = driver::datagram_room(&st.proto).min(data.len());
        let max_segments = self.udp.max_gso_segments().clamp(1, INLINE_DATAGRAMS);
        let mut batch = driver::Batch { destination: self.local_addr, data, len: 0, segment: 0, count: 0 };
        let mut wake = false;
        let mut polled = 0;
        while polled < INLINE_DATAGRAMS {
            if batch.count > 0 && !batch.open_for(room, max_segments) && !self.send_batch_inline(st, &mut batch) {
                // What follows must not overtake what the driver now holds.
                wake = true;
                break;
            }
            let start = batch.len;
            let Some((destination, transmit)) = st.proto.poll_transmit(now, &mut batch.data[start..start + room]) else { break };
            polled += 1;
            let size = transmit.size;
            if batch.count > 0 && (destination != batch.destination || size > batch.segment) {
                // Another destination or a longer datagram: what is held leaves first.
                if !self.send_batch_inline(st, &mut batch) {
                    st.responses.push((destination, batch.data[start..start + size].to_vec()));
                    wake = true;
                    break;
                }
                batch.data.copy_within(start..start + size, 0);
            }
            if batch.count == 0 {
                batch.destination = destination;
                batch.segment = size;
            }
            batch.len += size;
            batch.count += 1;
        }
        if batch.count > 0 {
            wake |= !self.send_batch_inline(st, &mut batch);
        }
        st.inline_scratch = batch.data;
        if polled == INLINE_DATAGRAMS {
            wake = true;
        }
        // Sending armed timers (retransmission, pacing); the driver must wake for the earliest.
        match (st.proto.poll_timeout(), st.driver_deadline) {
            (Some(at), Some(sleeping_until)) if at >= sleeping_until => {}
            (None, _) => {}
            _ => wake = true,
        }
        wake
    }

    /// Sends the batch from the calling thread and empties it. On failure (a full socket
    /// buffer, or anything else) its datagrams go to the driver, which sends them and waits
    /// if it must; returns whether they left here.
    fn send_batch_inline(&self, st: &mut State, batch: &mut driver::Batch) -> bool {
        let sent = driver::try_send(self, &self.inline_socket, None, &batch.transmit()).is_ok();
        if !sent {
            for datagram in batch.data[..batch.len].chunks(batch.segment) {
                st.responses.push((batch.destination, datagram.to_vec()));
            }
        }
        batch.len = 0;
        batch.count = 0;
        sent
    }
}

/// Datagrams a write to an idle connection sends on the writer's own thread; the rest
/// (a bulk writer's) go through the driver, in GSO batches.
const INLINE_DATAGRAMS: usize = 4;

/// One UDP socket serving many connections.
#[derive(Clone)]
pub struct Endpoint {
    shared: Arc<Shared>,
}

impl Endpoint {
    /// Binds `addr` and starts the endpoint's driver where `config.driver` says.
    pub async fn bind(addr: SocketAddr, config: EndpointConfig) -> Result<Endpoint, NetError> {
        let (shared, std_socket) = Shared::bind(addr, config)?;
        match shared.config.driver {
            DriverPlacement::Thread => driver::start(shared.clone(), std_socket),
            DriverPlacement::Task => driver::spawn(shared.clone(), std_socket),
        }
        .map_err(NetError::Io)?;
        Ok(Endpoint { shared })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// The endpoint's static public key, with protection (clients pin it with `--peer-key`).
    pub fn public_key(&self) -> Option<fencepost_proto::PublicKey> {
        self.shared.lock().proto.public_key()
    }

    /// Received bytes all connections hold now, against `EndpointConfig::buffer_budget`.
    pub fn buffered_bytes(&self) -> usize {
        self.shared.lock().proto.buffered_bytes()
    }

    /// Receive calls a reading task made itself, instead of waiting for the driver's thread
    /// to receive for it: in a request/reply exchange on the endpoint's only connection.
    pub fn reader_receives(&self) -> u64 {
        self.shared.reader_receives.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Times the endpoint's driver ended a wait (for the socket, a timer or a task's
    /// request) and looked at its connections again. In a request/reply exchange with a
    /// watching reader this grows about once per [`READER_WATCH`], not once per datagram.
    pub fn driver_wakeups(&self) -> u64 {
        self.shared.driver_wakeups.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The socket's receive buffer as the kernel counts it (`None` where it does not say).
    pub fn receive_buffer(&self) -> Option<usize> {
        self.shared.receive_buffer
    }

    /// Receive drops the kernel counted at the endpoint's socket, most often for a full
    /// receive buffer (`None` where it does not say): loss that is this host's, not the
    /// path's. With GRO one drop may be several datagrams the kernel had merged.
    pub fn socket_receive_drops(&self) -> Option<u64> {
        receive_drops_of(&self.shared.inline_socket)
    }

    /// What to tell a user whose socket got less receive buffer than
    /// [`RECEIVE_BUFFER_WANTED`], with the command that gives it more; `None` when it got
    /// enough or the system does not say.
    pub fn receive_buffer_warning(&self) -> Option<String> {
        let have = self.shared.receive_buffer.filter(|&b| b < RECEIVE_BUFFER_WANTED)?;
        let size = |b: usize| if b >= 1 << 20 { format!("{:.0} MiB", b as f64 / f64::from(1 << 20)) } else { format!("{} KiB", b >> 10) };
        Some(format!(
            "the socket's receive buffer is {} (held there by the system's cap, net.core.rmem_max; fencepost asks for {}): \
             at more than a few hundred Mbit/s a host busy elsewhere overflows it, and the datagrams the kernel drops read as loss. \
             Raise the cap (sysctl -w net.core.rmem_max={}) or run as root",
            size(have),
            size(RECEIVE_BUFFER_WANTED),
            RECEIVE_BUFFER_WANTED / 2
        ))
    }

    /// Datagrams the endpoint dropped before a connection saw them.
    pub fn stats(&self) -> EndpointStats {
        self.shared.lock().proto.stats().clone()
    }

    /// Opens a connection and waits for the handshake.
    pub async fn connect(&self, addr: SocketAddr) -> Result<Connection, NetError> {
        let handle = self.shared.open_connection(addr)?;
        self.shared.wake_driver.notify_one();
        let connection = Connection { shared: self.shared.clone(), handle, remote: addr };
        let after = self.shared.config.connect_timeout;
        match tokio::time::timeout(after, connection.established()).await {
            Ok(Ok(())) => Ok(connection),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                connection.abort();
                Err(NetError::ConnectTimeout { addr, after, hint: connect_hint(&self.shared.config) })
            }
        }
    }

    /// The next connection a peer opened; `None` once the endpoint stopped.
    pub async fn accept(&self) -> Option<Connection> {
        poll_fn(|cx| {
            let mut st = self.shared.lock();
            if let Some(handle) = st.accept_queue.pop_front() {
                let remote = *st.proto.remote(handle).expect("an accepted connection has a remote");
                return Poll::Ready(Some(Connection { shared: self.shared.clone(), handle, remote }));
            }
            if st.stopped.is_some() {
                return Poll::Ready(None);
            }
            st.accept_waiter.register(cx.waker());
            Poll::Pending
        })
        .await
    }

    /// Stops the driver: connections end at once (no FIN, no reset), as if the host vanished.
    pub fn shutdown(&self) {
        let mut st = self.shared.lock();
        st.stopped.get_or_insert_with(|| "shut down".to_string());
        for w in st.waiters.values_mut() {
            w.wake_all();
        }
        st.accept_waiter.wake();
        drop(st);
        self.shared.wake_driver.notify_one();
    }

    /// Live connections (including ones closing).
    pub fn connection_count(&self) -> usize {
        self.shared.lock().proto.len()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // The driver ends once it holds the last reference; let it look now.
        self.shared.wake_driver.notify_one();
    }
}

/// A byte stream over one fencepost connection.
pub struct Connection {
    shared: Arc<Shared>,
    handle: ConnectionHandle,
    remote: SocketAddr,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection").field("remote", &self.remote).finish_non_exhaustive()
    }
}

/// What one read of a connection came to, under the endpoint's lock.
enum ReadOutcome {
    Read { n: usize, wake_driver: bool },
    /// Nothing readable yet (whether the peer alternates with us: request and reply).
    Nothing { peer_alternates: bool },
    Lost(fencepost_proto::ConnectionError),
}

impl Connection {
    pub fn remote_addr(&self) -> SocketAddr {
        self.remote
    }

    /// The server's static key as the handshake proved it (a client's connection, with protection).
    pub fn peer_key(&self) -> Option<fencepost_proto::PublicKey> {
        self.shared.lock().proto.connection(self.handle).and_then(|c| c.peer_static_key())
    }

    /// The packets are encrypted and authenticated (wire format version 2).
    pub fn is_protected(&self) -> bool {
        self.shared.lock().proto.connection(self.handle).is_some_and(|c| c.is_protected())
    }

    pub fn stats(&self) -> ConnectionStats {
        let st = self.shared.lock();
        st.proto.connection(self.handle).map(|c| c.stats().clone()).unwrap_or_default()
    }

    /// Stream bytes the peer acknowledged without a gap (what its application can have read).
    pub fn acknowledged(&self) -> u64 {
        let st = self.shared.lock();
        st.proto.connection(self.handle).map_or(0, |c| c.stream_bytes_acknowledged())
    }

    /// RTT, congestion window and bytes in flight right now: (srtt, cwnd, in flight).
    pub fn path(&self) -> (Duration, u64, u64) {
        let st = self.shared.lock();
        match st.proto.connection(self.handle) {
            Some(c) => (Duration::from_micros(c.rtt().get().total_micros()), c.congestion_window(), c.bytes_in_flight()),
            None => (Duration::ZERO, 0, 0),
        }
    }

    /// The mean of every RTT sample the connection took, if it took any.
    pub fn rtt_mean(&self) -> Option<Duration> {
        let st = self.shared.lock();
        let mean_us = st.proto.connection(self.handle)?.rtt_history().mean_us()?;
        Some(Duration::from_micros(mean_us.round() as u64))
    }

    fn lost(&self, error: ConnectionError) -> NetError {
        NetError::ConnectionLost { addr: self.remote, error }
    }

    async fn established(&self) -> Result<(), NetError> {
        poll_fn(|cx| {
            let mut st = self.shared.lock();
            if let Some(why) = &st.stopped {
                return Poll::Ready(Err(NetError::EndpointClosed(why.clone())));
            }
            let Some(conn) = st.proto.connection(self.handle) else {
                return Poll::Ready(Err(NetError::EndpointClosed("connection forgotten".into())));
            };
            if let Some(e) = conn.error() {
                return Poll::Ready(Err(self.lost(e.clone())));
            }
            if conn.is_established() || conn.is_closed() {
                return Poll::Ready(Ok(()));
            }
            if let Some(w) = st.waiters.get_mut(&self.handle) {
                w.connected.register(cx.waker());
            }
            Poll::Pending
        })
        .await
    }

    /// Finishes this side's stream (a FIN after the data written); reading goes on.
    pub fn finish(&self) {
        let mut st = self.shared.lock();
        let now = self.shared.now();
        if let Some(conn) = st.proto.connection_mut(self.handle) {
            conn.close(now);
        }
        drop(st);
        self.shared.wake_driver.notify_one();
    }

    /// Waits until both directions are finished and acknowledged (or the connection is lost).
    pub async fn closed(&self) -> Result<(), NetError> {
        poll_fn(|cx| {
            let mut st = self.shared.lock();
            if let Some(why) = &st.stopped {
                return Poll::Ready(Err(NetError::EndpointClosed(why.clone())));
            }
            let Some(conn) = st.proto.connection(self.handle) else { return Poll::Ready(Ok(())) };
            if let Some(e) = conn.error() {
                return Poll::Ready(Err(self.lost(e.clone())));
            }
            let closed = conn.is_closed();
            // The peer's FIN that closed it is owed an ack, which may still be in the core
            // or in the driver's hands: an application that exits as soon as this returns
            // would take it along, and the peer would resend to nobody until its own wait
            // ran out (seen on loopback: "the client did not finish closing").
            let left_core = closed && !conn.owes_ack() && st.responses.is_empty();
            // Out of the core, it is in a turn the driver has taken, and on the wire once
            // that turn is sent. Waiting instead for a moment when the driver sent nothing
            // never ended while other connections kept it busy: each of a hundred bulk
            // connections over loopback that finished early was woken after every turn,
            // found the driver sending again, and waited once more, until the last one
            // finished (a quarter of the client's futex calls).
            let taken = st.turns_taken;
            let flush_after = match st.waiters.get_mut(&self.handle) {
                Some(w) if left_core => Some(*w.flush_after.get_or_insert(taken)),
                Some(w) => {
                    // A later FIN of the peer's may be owed an ack again: that one counts.
                    w.flush_after = None;
                    None
                }
                None => None,
            };
            if left_core && (!st.driver_sending || flush_after.is_some_and(|turn| st.turns_sent >= turn)) {
                return Poll::Ready(Ok(()));
            }
            if let Some(w) = st.waiters.get_mut(&self.handle) {
                w.closed.register(cx.waker());
            }
            if closed {
                // One entry per connection is enough: the driver wakes every closed() waiter it holds.
                if !st.flush_waits.contains(&self.handle) {
                    st.flush_waits.push(self.handle);
                }
                drop(st);
                self.shared.wake_driver.notify_one();
            }
            Poll::Pending
        })
        .await
    }

    /// Graceful close: finish, then wait for the peer to finish too.
    pub async fn close(&self) -> Result<(), NetError> {
        self.finish();
        self.closed().await
    }

    /// Aborts: the peer gets a reset; buffered data is dropped.
    pub fn abort(&self) {
        let mut st = self.shared.lock();
        let now = self.shared.now();
        if let Some(conn) = st.proto.connection_mut(self.handle) {
            conn.reset(now);
        }
        drop(st);
        self.shared.wake_driver.notify_one();
    }

    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| self.poll_read_bytes(cx, buf)).await
    }

    /// Like `read`, through a shared reference: one task may read while another writes.
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| self.poll_read_bytes(cx, buf)).await
    }

    /// Reads up to `max` bytes without copying them out: waits like `recv`, then hands
    /// them to `consume` where the transport holds them (in order, a slice for each
    /// buffer they arrived in, about one per packet).
    /// `consume` runs under the endpoint's lock, which the driver needs for every packet:
    /// keep it short (count, parse a header, copy a little); work such as hashing belongs
    /// after a plain `recv`. `Ok(0)`: the peer finished and everything was read.
    pub async fn recv_with(&self, max: usize, mut consume: impl FnMut(&[u8])) -> io::Result<usize> {
        poll_fn(|cx| self.poll_read_with(cx, max, &mut consume)).await
    }

    /// Queues what fits of `buf` (at least one byte, waiting for room); through a shared reference.
    pub async fn send(&self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        poll_fn(|cx| self.poll_write_bytes(cx, buf)).await
    }

    /// Like [`Connection::send`] for bytes held as [`Bytes`]: what the send buffer takes it
    /// keeps without a copy (another reference to the same memory), so a sender that has
    /// its data in memory already pays one copy per byte, into the packet, instead of two.
    /// Returns how many bytes from the front of `data` were taken (at least one).
    pub async fn send_shared(&self, data: &Bytes) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        poll_fn(|cx| self.poll_write_by(cx, data.len(), |conn| conn.write_shared(data))).await
    }

    /// Writes all of `buf`, waiting for send-buffer room as needed.
    pub async fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = poll_fn(|cx| self.poll_write_bytes(cx, buf)).await?;
            buf = &buf[n..];
        }
        Ok(())
    }

    fn poll_read_bytes(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut filled = 0;
        self.poll_read_with(cx, buf.len(), &mut |piece: &[u8]| {
            buf[filled..filled + piece.len()].copy_from_slice(piece);
            filled += piece.len();
        })
    }

    fn poll_read_with(&self, cx: &mut Context<'_>, max: usize, consume: &mut impl FnMut(&[u8])) -> Poll<io::Result<usize>> {
        // Each read counts against the task's share of tokio's cooperative budget, as
        // tokio's own sockets do, and once that is spent the task yields (then reads on). A
        // reader that always found data kept its thread from the runtime: the timers on it
        // fired only when the stream paused (a 1 s reverse `send -i 0.5` at 3 Gbit/s per
        // stream printed its first interval at 1.03 s, about one run in ten).
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        // Receives this call may make for itself before it leaves the rest to the driver: a
        // flood of datagrams for nobody must not keep the task from yielding.
        let mut receives_left = READER_RECEIVES_PER_POLL;
        loop {
            let mut st = self.shared.lock();
            if let Some(why) = &st.stopped {
                return Poll::Ready(Err(NetError::EndpointClosed(why.clone()).into()));
            }
            // Read with the endpoint's spare receive buffers lent (see `Endpoint::reading`).
            let read = st.proto.reading(self.handle, |conn| match conn.read_with(max, &mut *consume) {
                Ok(n) => ReadOutcome::Read { n, wake_driver: conn.wants_transmit() },
                Err(ReadError::WouldBlock) => ReadOutcome::Nothing { peer_alternates: conn.peer_alternates() },
                Err(ReadError::ConnectionLost(e)) => ReadOutcome::Lost(e),
            });
            match read {
                None => return Poll::Ready(Ok(0)),
                Some(ReadOutcome::Read { n, wake_driver }) => {
                    drop(st);
                    if wake_driver {
                        self.shared.wake_driver.notify_one();
                    }
                    coop.made_progress();
                    return Poll::Ready(Ok(n));
                }
                Some(ReadOutcome::Nothing { peer_alternates }) => {
                    if let Some(w) = st.waiters.get_mut(&self.handle) {
                        w.read.register(cx.waker());
                    }
                    let receive_here = peer_alternates && st.waiters.len() == 1 && self.shared.config.driver == DriverPlacement::Thread;
                    drop(st);
                    if receive_here && receives_left > 0 && self.shared.receive_for_reader(cx, self.handle) {
                        receives_left -= 1;
                        continue;
                    }
                    return Poll::Pending;
                }
                Some(ReadOutcome::Lost(e)) => return Poll::Ready(Err(self.lost(e).into())),
            }
        }
    }

    fn poll_write_bytes(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_by(cx, buf.len(), |conn| conn.write(buf))
    }

    /// A write of `offered` bytes through `write`, which returns what the connection took.
    fn poll_write_by(
        &self,
        cx: &mut Context<'_>,
        offered: usize,
        write: impl FnOnce(&mut fencepost_proto::Connection) -> Result<usize, WriteError>,
    ) -> Poll<io::Result<usize>> {
        // A writer that always finds room yields now and then too (see `poll_read_with`).
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let mut st = self.shared.lock();
        if let Some(why) = &st.stopped {
            return Poll::Ready(Err(NetError::EndpointClosed(why.clone()).into()));
        }
        let Some(conn) = st.proto.connection_mut(self.handle) else {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::NotConnected, "connection forgotten")));
        };
        // Only the step from nothing to send to something to send needs the driver woken:
        // a bulk writer would otherwise wake it for every write while it is busy anyway.
        let was_idle = !conn.has_unsent_data();
        match write(conn) {
            Ok(0) if offered > 0 => {
                if let Some(w) = st.waiters.get_mut(&self.handle) {
                    w.write.register(cx.waker());
                }
                Poll::Pending
            }
            Ok(n) => {
                if was_idle {
                    let wake = self.shared.send_inline(&mut st);
                    drop(st);
                    if wake {
                        self.shared.wake_driver.notify_one();
                    }
                }
                coop.made_progress();
                Poll::Ready(Ok(n))
            }
            Err(WriteError::Finished) => Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "write after close"))),
            Err(WriteError::ConnectionLost(e)) => Poll::Ready(Err(self.lost(e).into())),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Like a TCP socket: dropping closes gracefully in the background.
        let now = self.shared.now();
        self.shared.lock().release(self.handle, now);
        self.shared.wake_driver.notify_one();
    }
}

impl AsyncRead for Connection {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let unfilled = buf.initialize_unfilled();
        match self.poll_read_bytes(cx, unfilled) {
            Poll::Ready(Ok(n)) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_bytes(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Written bytes belong to the transport at once; there is no user-space buffer to flush.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.finish();
        Poll::Ready(Ok(()))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod socket_tests {
    use super::*;

    /// A socket nobody reads, with the smallest receive buffer the kernel allows: of 100
    /// datagrams sent to it, what the buffer cannot hold is dropped, and the kernel's count
    /// of those drops is what `receive_drops_of` reads, datagram for datagram.
    #[test]
    fn the_kernels_receive_drops_are_read_from_the_socket() {
        let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tiny: libc::c_int = 1;
        // SAFETY: a plain setsockopt with a c_int of the right size on a socket we own.
        let rc = unsafe {
            use std::os::fd::AsRawFd;
            libc::setsockopt(sink.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, (&tiny as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t)
        };
        assert_eq!(rc, 0);
        let buffer = receive_buffer_of(&sink).expect("SO_RCVBUF reads back");
        assert!(buffer < 16 << 10, "the kernel's minimum, not {buffer}");
        assert_eq!(receive_drops_of(&sink), Some(0));
        let source = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let datagram = [9u8; 1_000];
        for _ in 0..100 {
            source.send_to(&datagram, sink.local_addr().unwrap()).unwrap();
        }
        let dropped = receive_drops_of(&sink).expect("SO_MEMINFO reads");
        sink.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 2_000];
        let mut queued = 0;
        while sink.recv(&mut buf).is_ok() {
            queued += 1;
        }
        assert!(queued >= 1 && dropped >= 50, "{queued} queued, {dropped} dropped");
        assert_eq!(queued + dropped, 100, "every datagram either queued or counted as dropped");
    }
}

#[cfg(test)]
mod closing_tests {
    use super::*;

    /// `closed()` returns once the driver has sent the turn that took the connection's last
    /// ack from the core, even if the driver is never without datagrams in hand (as when
    /// other connections keep it sending): a waiter that needed a moment when the driver
    /// sent nothing waited for all of them to finish.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn closed_does_not_wait_for_the_driver_to_send_nothing() {
        let localhost: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let server = Endpoint::bind(localhost, EndpointConfig::server(TransportConfig::default())).await.unwrap();
        let sink = server.clone();
        tokio::spawn(async move {
            while let Some(conn) = sink.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 1 << 16];
                    while conn.recv(&mut buf).await.is_ok_and(|n| n > 0) {}
                    let _ = conn.close().await;
                });
            }
        });
        let client = Endpoint::bind(localhost, EndpointConfig::client(TransportConfig::default())).await.unwrap();
        let conn = client.connect(server.local_addr()).await.unwrap();
        client.shared.lock().always_sending = true;
        conn.send(b"a short request").await.unwrap();
        let closing = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
        assert!(matches!(closing, Ok(Ok(()))), "closed() waited for a driver with nothing in hand: {closing:?}");
        let st = client.shared.lock();
        assert!(st.driver_sending, "the driver reported itself sending throughout");
        assert!(st.turns_sent > 0 && st.turns_sent <= st.turns_taken, "turns sent {} of {}", st.turns_sent, st.turns_taken);
    }
}

//! A blocking endpoint whose I/O runs on the calling thread, like a TCP socket's.
//!
//! [`crate::Endpoint`] has a driver (a thread, or a task on the application's runtime)
//! that receives, sends and runs the timers, and wakes the task that reads. Every
//! received packet then crosses from the driver to the reader: a futex or an `epoll`
//! wake-up, a second system call to find the socket empty again, and a few microseconds
//! of scheduling, which is most of a small request/reply round trip on loopback.
//! Here there is no driver: a call that has to wait ([`Connection::read`], a
//! [`Connection::write`] with a full send buffer, [`Endpoint::accept`],
//! [`Connection::close`]) does the driver's work itself, sleeping until a datagram arrives
//! or the core's next timer is due. It sleeps on an io_uring receive where it can, so a
//! received reply costs one wake-up of the thread that waits for it and one system call,
//! as a blocking TCP socket's `read` does; elsewhere in `epoll_pwait2` and then a receive
//! (two calls). See [`Waiting`].
//!
//! The price is the one every event loop pays: the endpoint makes progress only while one
//! of its calls runs. Acks, retransmissions and the peer's handshakes wait while the
//! application does something else; a peer sees a long pause as loss and its timers back
//! off. It suits a client or a server that spends its time in the transport's calls (a
//! request/reply exchange, a bulk sender or receiver). The types are not `Send`: an
//! endpoint and its connections are used from the thread that bound it.

use crate::driver::{self, Inbox, Outgoing};
use crate::sockio;
#[cfg(target_os = "linux")]
use crate::uring::RingReceiver;
use crate::{connect_hint, EndpointConfig, NetError, Shared, State, WakerSet};
use fencepost_proto::{ConnectionHandle, ConnectionStats, ReadError, WriteError};
use std::cell::{Cell, RefCell};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One UDP socket serving many connections, driven by the thread that calls it.
pub struct Endpoint {
    io: Rc<Io>,
}

/// The endpoint's state and the buffers its calls receive into and send from.
struct Io {
    shared: Arc<Shared>,
    socket: UdpSocket,
    inbox: RefCell<Inbox>,
    out: RefCell<Outgoing>,
    /// Where a call that has nothing to do sleeps.
    wait: Wait,
    /// How long a wait asks the socket in a loop before it sleeps (`Endpoint::set_busy_poll`).
    busy_poll: Cell<Option<Duration>>,
    /// Nothing reached the core since its last turn, which left it with this deadline:
    /// `None` once a datagram arrived, the application's call changed it, or a call that
    /// changes it from outside [`Io::drive`] said so ([`Io::touch`]).
    settled: Cell<Option<Option<fencepost_proto::Instant>>>,
    /// The peer a client endpoint's socket is connected to.
    pinned: Cell<Pin>,
    /// Datagrams of the ring's last receive not yet handed to the core. The ring's next
    /// receive goes into the same buffer, so they are handed over before any wait.
    deferred: Cell<Option<Deferred>>,
    /// The kernel's receive drops at the socket, as the driver's thread watches them.
    overflow: RefCell<driver::OverflowWatch>,
}

/// Where datagrams left in the ring's buffer lie, and where they came from.
struct Deferred {
    from: SocketAddr,
    stride: usize,
    range: std::ops::Range<usize>,
}

/// Whether a client endpoint's socket is connected to its one peer: datagrams to it then
/// leave by `send` on the socket's cached route instead of a route lookup in every
/// `sendto` (about 0.9 µs per datagram on loopback here, 0.7 µs of a 64-byte ping-pong's
/// round trip). A connected socket hears only its peer, so a second peer ends it for good;
/// it is connected once the handshake is done, to the address the server answered from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pin {
    /// No connection established yet.
    Unused,
    /// Connected to this peer (as the core names it: IPv4 peers in their IPv4 form).
    To(SocketAddr),
    /// A server (it hears from anyone), a second peer came, or connecting failed.
    Never,
}

impl Io {
    /// Runs the endpoint until `ready` has an answer, or until `until` (`Ok(None)`).
    /// Each turn asks `ready` first, then lets the core run its timers and send what is due
    /// (so a write's data, or a read's window update, leaves before the call returns), and
    /// waits for the socket or the core's next timer only when neither gave anything.
    fn drive<T>(&self, until: Option<Instant>, mut ready: impl FnMut(&Shared, &mut State) -> Option<T>) -> Result<Option<T>, NetError> {
        let mut out = self.out.borrow_mut();
        let mut inbox = self.inbox.borrow_mut();
        // Nobody registers a waker here; the core's events only need somewhere to go.
        let mut closing = WakerSet::default();
        loop {
            let (answer, mut deadline) = {
                let mut st = self.shared.lock();
                if let Some(why) = &st.stopped {
                    return Err(NetError::EndpointClosed(why.clone()));
                }
                let answer = ready(&self.shared, &mut st);
                // One clock reading for the check below, the socket's look and the turn.
                let now = self.shared.now();
                // A turn that would find the core as the last one left it, its timers not yet
                // due, is skipped (a read that waits right after the write that sent), unless
                // the socket's error queue holds something for it to read: a receive that
                // took an ICMP error brings nothing new to the core itself.
                let unchanged = match (self.settled.get(), &answer) {
                    (Some(deadline), None) => deadline.is_none_or(|at| at > now) && !self.shared.icmp_pending.load(std::sync::atomic::Ordering::Relaxed),
                    _ => false,
                };
                if unchanged {
                    (None, self.settled.get().flatten())
                } else {
                    self.overflow.borrow_mut().look(&self.shared, &mut st, &self.socket, now);
                    let mut deadline = driver::turn(&self.shared, &mut st, &mut out, &mut closing, now);
                    // The turn ran timers: what `ready` waits for may have come of them (a
                    // connection lost to its idle timer has no deadline left to wake us).
                    let answer = answer.or_else(|| {
                        let late = ready(&self.shared, &mut st);
                        if late.is_some() {
                            // What the answer did (a write) leaves in this pass too.
                            deadline = driver::turn(&self.shared, &mut st, &mut out, &mut closing, self.shared.now());
                        }
                        late
                    });
                    self.settled.set(Some(deadline));
                    (answer, deadline)
                }
            };
            let sent = !out.is_empty();
            self.flush(&mut out)?;
            // A turn stops at a bound (`driver::TURN_BATCHES`); the rest of what the core
            // would send now goes out in further turns before the call goes on or returns
            // (the core runs only inside calls, and the answer must not hold it back).
            while out.more_due() {
                {
                    let mut st = self.shared.lock();
                    if let Some(why) = &st.stopped {
                        return Err(NetError::EndpointClosed(why.clone()));
                    }
                    deadline = driver::turn(&self.shared, &mut st, &mut out, &mut closing, self.shared.now());
                    self.settled.set(Some(deadline));
                }
                self.flush(&mut out)?;
            }
            if answer.is_some() {
                return Ok(answer);
            }
            // What was just sent may be what `ready` waits for (a closing side's last ack).
            if sent {
                continue;
            }
            // The rest of the last receive, left until the answer it held had gone out.
            #[cfg(target_os = "linux")]
            if let (Some(rest), Wait::Ring(ring)) = (self.deferred.take(), &self.wait) {
                self.hand_over(rest.from, rest.stride, &mut ring.borrow_mut().buffer()[rest.range]);
                continue;
            }
            let now = Instant::now();
            if until.is_some_and(|u| u <= now) {
                return Ok(None);
            }
            let wake_at = match (deadline.map(|t| self.shared.instant(t)), until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let timeout = wake_at.map(|t| t.saturating_duration_since(now));
            if let Some(spin) = self.busy_poll.get() {
                // Ask the socket again and again for up to `spin` (never past the deadline)
                // before sleeping: a reply that comes within it costs no wake-up at all.
                let spin_until = now + timeout.map_or(spin, |t| t.min(spin));
                let mut got = false;
                while !got && Instant::now() < spin_until {
                    got = self.receive_once(&mut inbox)?;
                    std::hint::spin_loop();
                }
                if got {
                    continue;
                }
            }
            match &self.wait {
                #[cfg(target_os = "linux")]
                Wait::Ring(ring) => self.receive_on_ring(&mut ring.borrow_mut(), timeout)?,
                Wait::Epoll(poller) => {
                    // Readable with nothing to read: the socket's error queue holds
                    // something (epoll reports that whatever was asked), which the next turn
                    // reads, or each wait would end at once again.
                    if poller.readable(timeout).map_err(|e| self.fail(e))? && !self.receive_once(&mut inbox)? {
                        driver::note_icmp(&self.shared);
                    }
                }
            }
        }
    }

    /// One receive call into the core (if more waits, the next wait returns at once, and
    /// `ready` is asked between the two). Returns whether anything arrived.
    fn receive_once(&self, inbox: &mut Inbox) -> Result<bool, NetError> {
        let emptied = driver::receive(&self.shared, inbox, 1, 1, None, |iovs, metas| sockio::recv(&self.shared.udp, &self.socket, iovs, metas));
        let arrived = !emptied.map_err(|e| self.fail(e))?;
        if arrived {
            self.settled.set(None);
        }
        Ok(arrived)
    }

    /// Sleeps on the ring until a datagram comes or `timeout` passes. The core gets the
    /// first datagram of what came at once, the rest (GRO joins what a peer sent together)
    /// once the call has nothing left to send: a reply and the ack that rode behind it come
    /// together, and the ack can wait until the answer to the reply has gone out.
    #[cfg(target_os = "linux")]
    fn receive_on_ring(&self, ring: &mut RingReceiver, timeout: Option<Duration>) -> Result<(), NetError> {
        match ring.wait(timeout) {
            Ok(Some(datagram)) => {
                let first = datagram.stride.max(1).min(datagram.len);
                self.hand_over(datagram.from, datagram.stride, &mut ring.buffer()[..first]);
                if first < datagram.len {
                    self.deferred.set(Some(Deferred { from: datagram.from, stride: datagram.stride, range: first..datagram.len }));
                }
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) if driver::is_passing(&self.shared, &e) => Ok(()),
            // The socket's poll said ready with nothing to read: an ICMP error in its error
            // queue (another call took the error itself). Read there on the next turn, or
            // the receive queued next would find the same and come back at once, again.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                driver::note_icmp(&self.shared);
                Ok(())
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Gives the core the datagrams of `buf` (one, or GRO's run of `stride`-byte ones) from `from`.
    #[cfg(target_os = "linux")]
    fn hand_over(&self, from: SocketAddr, stride: usize, buf: &mut [u8]) {
        self.settled.set(None);
        let mut st = self.shared.lock();
        driver::deliver(&mut st, self.shared.now(), from, stride, buf);
    }

    /// Sends every batch the core wrote, waiting for room in the socket's buffer if need be.
    fn flush(&self, out: &mut Outgoing) -> Result<(), NetError> {
        let pinned = match self.pinned.get() {
            Pin::To(peer) => Some(peer),
            Pin::Unused | Pin::Never => None,
        };
        while let Some(batch) = out.next_batch() {
            let transmit = batch.transmit();
            let sent = loop {
                match driver::try_send(&self.shared, &self.socket, pinned, &transmit) {
                    // A full send buffer: wait for room, as a blocking socket would.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        wait_writable(&self.socket).map_err(|e| self.fail(e))?;
                    }
                    other => break other,
                }
            };
            out.recycle(batch);
            if let Err(e) = sent {
                if driver::is_fatal(&e) {
                    return Err(self.fail(e));
                }
            }
        }
        Ok(())
    }

    /// Stops the endpoint after a socket error; the error every later call gets.
    fn fail(&self, e: io::Error) -> NetError {
        let why = format!("socket error: {e}");
        self.shared.lock().stopped.get_or_insert(why.clone());
        NetError::EndpointClosed(why)
    }

    /// Before a connection to `peer` opens: a socket connected to another peer (this is a
    /// second one) goes back to unconnected for good, as `pin` would.
    fn hold_pin(&self, peer: SocketAddr) -> Result<(), NetError> {
        match self.pinned.get() {
            Pin::To(pinned) if pinned != driver::normalize(peer) => self.pin(peer),
            _ => Ok(()),
        }
    }

    /// Connects the socket to `peer`, the peer of a connection just opened, where that
    /// is this client endpoint's only peer; back to unconnected for a second one.
    fn pin(&self, peer: SocketAddr) -> Result<(), NetError> {
        let peer = driver::normalize(peer);
        match self.pinned.get() {
            Pin::Never => Ok(()),
            Pin::To(pinned) if pinned == peer => Ok(()),
            Pin::Unused if self.shared.config.server => {
                self.pinned.set(Pin::Never);
                Ok(())
            }
            Pin::Unused => {
                let target = sockio::as_socket_names(peer, self.shared.local_addr.is_ipv6());
                self.pinned.set(if self.socket.connect(target).is_ok() { Pin::To(peer) } else { Pin::Never });
                Ok(())
            }
            Pin::To(_) => {
                self.pinned.set(Pin::Never);
                self.unpin().map_err(|e| self.fail(e))
            }
        }
    }

    /// Dissolves the socket's connection. Linux then also drops the port a socket bound to
    /// port 0 was given (and the address a wildcard bind was narrowed to): it is bound to
    /// the same address and port again, which are the endpoint's.
    fn unpin(&self) -> io::Result<()> {
        let fd = self.socket.as_raw_fd();
        // SAFETY: all-zero is a valid sockaddr; AF_UNSPEC asks connect to dissolve.
        let mut unspec: libc::sockaddr = unsafe { std::mem::zeroed() };
        unspec.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
        // SAFETY: a sockaddr of its own size, for the length of the call.
        if unsafe { libc::connect(fd, &unspec, std::mem::size_of::<libc::sockaddr>() as libc::socklen_t) } < 0 {
            return Err(io::Error::last_os_error());
        }
        if self.socket.local_addr()? != self.shared.local_addr {
            let addr = socket2::SockAddr::from(self.shared.local_addr);
            // SAFETY: an address of its own length, for the length of the call.
            if unsafe { libc::bind(fd, addr.as_ptr().cast(), addr.len()) } < 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(e.kind(), format!("could not keep the endpoint's address {} after a second peer: {e}", self.shared.local_addr)));
            }
        }
        Ok(())
    }

    /// The application changed the core outside [`Io::drive`] (opened, closed or reset a
    /// connection): the next turn must run.
    fn touch(&self) {
        self.settled.set(None);
    }

    /// One turn: the core sends what it now has to (a FIN, a reset, a window update).
    fn push(&self) -> Result<(), NetError> {
        self.drive(None, |_, _| Some(())).map(|_| ())
    }
}

/// How a blocking endpoint's calls sleep when they have to wait for the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// On an io_uring receive: the wait and the receive are one system call per wake-up
    /// (Linux 6.1 or later, io_uring allowed, GRO available).
    IoUring,
    /// In `epoll_pwait2`, then a receive: two system calls per wake-up, anywhere.
    Epoll,
}

/// Where a call that has nothing to do sleeps. One per endpoint, so the ring's larger
/// variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
enum Wait {
    #[cfg(target_os = "linux")]
    Ring(RefCell<RingReceiver>),
    Epoll(Poller),
}

impl Wait {
    /// The ring if `preferred` and it can be had, else epoll. Without GRO the ring would
    /// take one datagram per call where `recvmmsg` takes a batch: epoll then too.
    fn new(shared: &Shared, socket: &UdpSocket, preferred: Waiting) -> io::Result<Wait> {
        #[cfg(target_os = "linux")]
        if preferred == Waiting::IoUring && shared.udp.gro_segments() > 1 {
            if let Ok(ring) = RingReceiver::new(socket, driver::RECV_BUF) {
                return Ok(Wait::Ring(RefCell::new(ring)));
            }
        }
        let _ = (shared, preferred);
        Poller::new(socket).map(Wait::Epoll)
    }

    fn kind(&self) -> Waiting {
        match self {
            #[cfg(target_os = "linux")]
            Wait::Ring(_) => Waiting::IoUring,
            Wait::Epoll(_) => Waiting::Epoll,
        }
    }
}

/// The endpoint's socket registered once with an epoll instance, to wait for it to become
/// readable with a deadline in nanoseconds (`epoll_pwait2`): `ppoll` registers the socket
/// and removes it again in every call, which cost about two microseconds of each round
/// trip of a loopback ping-pong.
struct Poller {
    epoll: OwnedFd,
    /// The kernel has no `epoll_pwait2` (before 5.11): `epoll_wait`, in milliseconds
    /// rounded up (a timer then fires up to a millisecond late, as tokio's do).
    millisecond_waits: Cell<bool>,
}

/// `epoll_pwait2`'s number on the architectures that share the generic system call table's
/// numbering for it (x86_64, aarch64, riscv64 among them).
const SYS_EPOLL_PWAIT2: libc::c_long = 441;

impl Poller {
    fn new(socket: &UdpSocket) -> io::Result<Poller> {
        // SAFETY: plain system calls; the descriptor epoll_create1 returns is ours to own.
        let epoll = unsafe {
            let fd = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(fd)
        };
        let mut event = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 0 };
        // SAFETY: both descriptors are open; the event is read during the call only.
        if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, socket.as_raw_fd(), &mut event) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Poller { epoll, millisecond_waits: Cell::new(false) })
    }

    /// Waits until the socket is readable or `timeout` passes (`None`: no limit); returns
    /// whether it is.
    fn readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut event = libc::epoll_event { events: 0, u64: 0 };
        let n = if self.millisecond_waits.get() || cfg!(not(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64"))) {
            let ms = timeout.map_or(-1, |t| t.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int);
            // SAFETY: one event's room, which outlives the call.
            unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), &mut event, 1, ms) as libc::c_long }
        } else {
            let ts = timeout.map(|d| libc::timespec { tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long });
            let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: one event's room and a timespec (or null) that outlive the call; no signal mask.
            unsafe { libc::syscall(SYS_EPOLL_PWAIT2, self.epoll.as_raw_fd(), &mut event as *mut libc::epoll_event, 1, ts_ptr, std::ptr::null::<libc::sigset_t>(), 0usize) }
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EINTR) => Ok(false),
                Some(libc::ENOSYS) if !self.millisecond_waits.get() => {
                    self.millisecond_waits.set(true);
                    self.readable(timeout)
                }
                _ => Err(e),
            };
        }
        Ok(n > 0)
    }
}

/// Waits until the socket has room to send.
fn wait_writable(socket: &UdpSocket) -> io::Result<()> {
    let mut fd = libc::pollfd { fd: socket.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
    // SAFETY: one pollfd we own, for the length of the call.
    if unsafe { libc::poll(&mut fd, 1, -1) } < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

impl Endpoint {
    /// Binds `addr`. No thread is started: the endpoint runs inside its calls
    /// (`config.driver` is not used). Its calls sleep on io_uring where they can, else in
    /// epoll ([`Endpoint::waiting`] says which).
    pub fn bind(addr: SocketAddr, config: EndpointConfig) -> Result<Endpoint, NetError> {
        Endpoint::bind_waiting(addr, config, Waiting::IoUring)
    }

    /// [`Endpoint::bind`], its calls sleeping as `preferred` says where they can
    /// ([`Waiting::Epoll`] everywhere; [`Waiting::IoUring`] falls back to epoll).
    pub fn bind_waiting(addr: SocketAddr, config: EndpointConfig, preferred: Waiting) -> Result<Endpoint, NetError> {
        let (shared, socket) = Shared::bind(addr, config)?;
        let out = RefCell::new(Outgoing::new(&shared));
        let wait = Wait::new(&shared, &socket, preferred).map_err(NetError::Io)?;
        Ok(Endpoint { io: Rc::new(Io { shared, socket, inbox: RefCell::new(Inbox::new()), out, wait, busy_poll: Cell::new(None), settled: Cell::new(None), pinned: Cell::new(Pin::Unused), deferred: Cell::new(None), overflow: RefCell::default() }) })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.io.shared.local_addr
    }

    /// How this endpoint's calls sleep.
    pub fn waiting(&self) -> Waiting {
        self.io.wait.kind()
    }

    /// The endpoint's static public key, with protection (clients pin it with `--peer-key`).
    pub fn public_key(&self) -> Option<fencepost_proto::PublicKey> {
        self.io.shared.lock().proto.public_key()
    }

    /// Busy polling: a call that waits first asks the socket, in a loop on its thread, for
    /// up to `spin` before it sleeps (`None`, the default: it sleeps at once). A reply that
    /// comes within `spin` then costs no sleep and no wake-up (in a 64-byte loopback
    /// ping-pong, a few microseconds of each round trip), at the price of a core kept busy
    /// while it waits, as Linux's own busy polling of sockets (`SO_BUSY_POLL`) does.
    pub fn set_busy_poll(&self, spin: Option<Duration>) {
        self.io.busy_poll.set(spin.filter(|s| !s.is_zero()));
    }

    /// Opens a connection and runs the handshake, for up to `EndpointConfig::connect_timeout`.
    pub fn connect(&self, addr: SocketAddr) -> Result<Connection, NetError> {
        let shared = &self.io.shared;
        // Pinned only once the handshake is done, to the address the server answered from:
        // a server bound to a wildcard address may answer from another of its addresses
        // (the connection then moves there), which a socket connected to `addr` would
        // never hear.
        self.io.hold_pin(addr)?;
        let handle = shared.open_connection(addr)?;
        self.io.touch();
        let connection = Connection { io: self.io.clone(), handle, remote: addr, read_timeout: None };
        let after = shared.config.connect_timeout;
        let established = self.io.drive(Some(Instant::now() + after), |_, st| {
            let conn = st.proto.connection(handle)?;
            if let Some(e) = conn.error() {
                return Some(Err(connection.lost(e.clone())));
            }
            (conn.is_established() || conn.is_closed()).then_some(Ok(()))
        })?;
        match established {
            Some(Ok(())) => {
                let remote = shared.lock().proto.remote(handle).copied().unwrap_or(addr);
                self.io.pin(remote)?;
                Ok(connection)
            }
            Some(Err(e)) => Err(e),
            None => {
                connection.abort();
                Err(NetError::ConnectTimeout { addr, after, hint: connect_hint(&shared.config) })
            }
        }
    }

    /// Waits for the next connection a peer opens (a server's endpoint).
    pub fn accept(&self) -> Result<Connection, NetError> {
        Ok(self.accept_within(None)?.expect("an accept without a time limit returns only with a connection"))
    }

    /// Like [`Endpoint::accept`], giving up after `timeout` (`Ok(None)`).
    pub fn accept_timeout(&self, timeout: Duration) -> Result<Option<Connection>, NetError> {
        self.accept_within(Some(Instant::now() + timeout))
    }

    fn accept_within(&self, until: Option<Instant>) -> Result<Option<Connection>, NetError> {
        let accepted = self.io.drive(until, |_, st| {
            let handle = st.accept_queue.pop_front()?;
            let remote = *st.proto.remote(handle).expect("an accepted connection has a remote");
            Some((handle, remote))
        })?;
        Ok(accepted.map(|(handle, remote)| Connection { io: self.io.clone(), handle, remote, read_timeout: None }))
    }

    /// Live connections (including ones closing).
    pub fn connection_count(&self) -> usize {
        self.io.shared.lock().proto.len()
    }
}

/// A byte stream over one fencepost connection of a blocking [`Endpoint`]; implements
/// `std::io::Read` and `std::io::Write`.
pub struct Connection {
    io: Rc<Io>,
    handle: ConnectionHandle,
    remote: SocketAddr,
    read_timeout: Option<Duration>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Connection").field("remote", &self.remote).finish_non_exhaustive()
    }
}

impl Connection {
    pub fn remote_addr(&self) -> SocketAddr {
        self.remote
    }

    pub fn stats(&self) -> ConnectionStats {
        let st = self.io.shared.lock();
        st.proto.connection(self.handle).map(|c| c.stats().clone()).unwrap_or_default()
    }

    /// The server's static key as the handshake proved it (a client's connection, with protection).
    pub fn peer_key(&self) -> Option<fencepost_proto::PublicKey> {
        self.io.shared.lock().proto.connection(self.handle).and_then(|c| c.peer_static_key())
    }

    /// The packets are encrypted and authenticated (wire format version 2).
    pub fn is_protected(&self) -> bool {
        self.io.shared.lock().proto.connection(self.handle).is_some_and(|c| c.is_protected())
    }

    /// How long a read waits for data before it fails with `TimedOut` (`None`, the
    /// default: until data, the peer's FIN, or the connection's idle timeout).
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        self.read_timeout = timeout;
    }

    fn lost(&self, error: fencepost_proto::ConnectionError) -> NetError {
        NetError::ConnectionLost { addr: self.remote, error }
    }

    /// Reads what has arrived, waiting for at least one byte. `Ok(0)`: the peer finished
    /// and everything was read.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let until = self.read_timeout.map(|t| Instant::now() + t);
        let read = self.io.drive(until, |_, st| {
            // With the endpoint's spare receive buffers lent (see `Endpoint::reading`).
            let Some(read) = st.proto.reading(self.handle, |conn| conn.read(buf)) else { return Some(Ok(0)) };
            match read {
                Ok(n) => Some(Ok(n)),
                Err(ReadError::WouldBlock) => None,
                Err(ReadError::ConnectionLost(e)) => Some(Err(self.lost(e))),
            }
        })?;
        match read {
            Some(result) => result.map_err(io::Error::from),
            None => Err(io::Error::new(io::ErrorKind::TimedOut, format!("nothing from {} within the read timeout", self.remote))),
        }
    }

    /// Queues what fits of `buf` (at least one byte, waiting for room) and sends what the
    /// window allows before it returns.
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let written = self.io.drive(None, |_, st| {
            let Some(conn) = st.proto.connection_mut(self.handle) else {
                return Some(Err(io::Error::new(io::ErrorKind::NotConnected, "connection forgotten")));
            };
            match conn.write(buf) {
                Ok(0) => None,
                Ok(n) => Some(Ok(n)),
                Err(WriteError::Finished) => Some(Err(io::Error::new(io::ErrorKind::BrokenPipe, "write after close"))),
                Err(WriteError::ConnectionLost(e)) => Some(Err(self.lost(e).into())),
            }
        })?;
        written.expect("a write without a time limit returns only with an answer")
    }

    /// Finishes this side's stream (a FIN after the data written); reading goes on.
    pub fn finish(&mut self) -> Result<(), NetError> {
        self.close_stream();
        self.io.push()
    }

    fn close_stream(&self) {
        let mut st = self.io.shared.lock();
        let now = self.io.shared.now();
        if let Some(conn) = st.proto.connection_mut(self.handle) {
            conn.close(now);
        }
        self.io.touch();
    }

    /// Waits until both directions are finished and acknowledged (or the connection is lost).
    pub fn closed(&mut self) -> Result<(), NetError> {
        let closed = self.io.drive(None, |_, st| {
            let Some(conn) = st.proto.connection(self.handle) else { return Some(Ok(())) };
            if let Some(e) = conn.error() {
                return Some(Err(self.lost(e.clone())));
            }
            // The peer's FIN is owed an ack: an application that exits as soon as this
            // returns must not take it along (the turn that sent it comes before this look).
            (conn.is_closed() && !conn.owes_ack() && st.responses.is_empty()).then_some(Ok(()))
        })?;
        closed.expect("closed() without a time limit returns only with an answer")
    }

    /// Graceful close: finish, then wait for the peer to finish too.
    pub fn close(&mut self) -> Result<(), NetError> {
        self.finish()?;
        self.closed()
    }

    /// Aborts: the peer gets a reset; buffered data is dropped.
    pub fn abort(&self) {
        {
            let mut st = self.io.shared.lock();
            let now = self.io.shared.now();
            if let Some(conn) = st.proto.connection_mut(self.handle) {
                conn.reset(now);
            }
        }
        self.io.touch();
        // The reset leaves now if it can; if the socket failed, there is no one to tell.
        let _ = self.io.push();
    }
}

impl io::Read for Connection {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Connection::read(self, buf)
    }
}

impl io::Write for Connection {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Connection::write(self, buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        // A write sends what the window allows before it returns; the rest belongs to the transport.
        Ok(())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Like a TCP socket: dropping closes gracefully. The FIN leaves now; the rest of the
        // close (its retransmissions, the peer's FIN) happens in the endpoint's later calls.
        let now = self.io.shared.now();
        self.io.shared.lock().release(self.handle, now);
        self.io.touch();
        let _ = self.io.push();
    }
}

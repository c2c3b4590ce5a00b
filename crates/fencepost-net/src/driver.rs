//! The endpoint's driver: socket in, core, socket out, timers, wake-ups, on its own thread.

use crate::{Shared, State, WakerSet, Waiters};
use fencepost_proto::{DatagramEvent, Event};
use quinn_udp::{RecvMeta, Transmit, BATCH_SIZE};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::Interest;

/// Largest datagram (or GRO-coalesced run of datagrams) one receive buffer holds.
const RECV_BUF: usize = 65_536;
/// Receive batches handled before transmitting again, so a flood of input cannot starve output.
const RECV_ROUNDS: usize = 8;
/// Batch buffers kept for reuse between rounds.
const SPARE_BATCHES: usize = 16;

/// Datagrams for one destination, of one size (the last may be shorter), sent in one
/// system call with generic segmentation offload when there are several.
struct Batch {
    destination: SocketAddr,
    data: Vec<u8>,
    segment: usize,
    count: usize,
}

/// Runs the driver on a thread of its own, with a single-threaded runtime for the socket
/// and the timers. On the application's runtime it would be one task among the
/// application's: a hundred writers each copying megabytes into their send buffers kept
/// it from reading acks for 50 ms and more, long enough for every sender's retransmission
/// timer to fire on a path that lost nothing. Here the OS schedules it beside them.
pub(crate) fn start(shared: Arc<Shared>, socket: std::net::UdpSocket) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
    let name = format!("fencepost-driver {}", shared.local_addr);
    std::thread::Builder::new().name(name).spawn(move || {
        runtime.block_on(async move {
            match tokio::net::UdpSocket::from_std(socket) {
                Ok(socket) => run(shared, socket).await,
                Err(e) => stop(&shared, format!("socket error: {e}")),
            }
        })
    })?;
    Ok(())
}

async fn run(shared: Arc<Shared>, socket: tokio::net::UdpSocket) {
    let mut storage = vec![0u8; RECV_BUF * BATCH_SIZE];
    let mut metas = vec![RecvMeta::default(); BATCH_SIZE];
    let mut scratch = vec![0u8; 65_536];
    let mut batches: Vec<Batch> = Vec::new();
    let mut spare: Vec<Vec<u8>> = Vec::new();
    let max_segments = shared.udp.max_gso_segments().max(1);
    let mut closing = WakerSet::default();
    loop {
        // Nobody holds the endpoint or any of its connections: nothing can use it again.
        if Arc::strong_count(&shared) == 1 {
            return;
        }
        // Acks that arrived while the driver was busy go in before any timer is looked at:
        // after a long burst of sending, the timers are due and the acks that would stop them
        // wait in the socket. (Straight to the socket: tokio learns of new data only when the
        // driver next waits.)
        if let Err(e) = receive(&shared, &socket, &mut storage, &mut metas, false) {
            stop(&shared, format!("socket error: {e}"));
            closing.wake();
            return;
        }
        let deadline = {
            let mut st = shared.lock();
            if st.stopped.is_some() {
                return;
            }
            let now = shared.now();
            st.proto.handle_timeout(now);
            for (destination, response) in st.responses.drain(..) {
                add_to_batches(&mut batches, &mut spare, destination, &response, max_segments);
            }
            collect_transmits(&mut st, now, &mut scratch, &mut batches, &mut spare, max_segments);
            dispatch(&mut st, &mut closing);
            let deadline = st.proto.poll_timeout();
            st.driver_deadline = deadline;
            st.driver_sending = !batches.is_empty();
            deadline
        };
        let sending = !batches.is_empty();
        for batch in batches.drain(..) {
            if let Err(e) = send(&shared, &socket, &batch).await {
                // A datagram the kernel refuses (a vanished route, ICMP feedback) is a lost
                // packet to the transport, which recovers; only a dead socket stops us.
                if is_fatal(&e) {
                    stop(&shared, format!("socket error: {e}"));
                    closing.wake();
                    return;
                }
            }
            // A flood of handshakes makes a batch per source address; keep only a few buffers
            // for later, or each would stay as large as the biggest batch it ever held.
            if spare.len() < SPARE_BATCHES {
                spare.push(batch.data);
            }
        }
        if sending {
            shared.lock().driver_sending = false;
        }
        // Only now: the last ack a closed connection owed its peer is on the wire, and an
        // application that exits as soon as `closed()` returns cannot take it with it.
        closing.wake();
        let sleep_until = deadline.map_or_else(
            // With nothing scheduled, look again each second whether the endpoint was let go.
            || tokio::time::Instant::now() + std::time::Duration::from_secs(1),
            |t| tokio::time::Instant::from_std(shared.epoch + std::time::Duration::from_micros(t.total_micros())),
        );
        tokio::select! {
            // Input first when several are ready, for the same reason.
            biased;
            ready = socket.readable() => {
                if let Err(e) = ready {
                    stop(&shared, format!("socket error: {e}"));
                    return;
                }
                if let Err(e) = receive(&shared, &socket, &mut storage, &mut metas, true) {
                    stop(&shared, format!("socket error: {e}"));
                    return;
                }
            }
            _ = tokio::time::sleep_until(sleep_until) => {}
            _ = shared.wake_driver.notified() => {}
        }
    }
}

fn is_fatal(e: &io::Error) -> bool {
    // EBADF: the socket itself is gone.
    e.raw_os_error() == Some(9)
}

fn stop(shared: &Shared, why: String) {
    let mut st = shared.lock();
    st.stopped.get_or_insert(why);
    for w in st.waiters.values_mut() {
        w.wake_all();
    }
    st.accept_waiter.wake();
}

/// Drains the socket (up to a few batches) into the core.
/// `via_tokio`: through tokio's readiness (which a WouldBlock resets), or straight to the
/// socket whatever tokio believes.
fn receive(shared: &Shared, socket: &tokio::net::UdpSocket, storage: &mut [u8], metas: &mut [RecvMeta], via_tokio: bool) -> io::Result<()> {
    for _ in 0..RECV_ROUNDS {
        let mut iovs: Vec<IoSliceMut<'_>> = storage.chunks_mut(RECV_BUF).map(IoSliceMut::new).collect();
        let received = if via_tokio {
            socket.try_io(Interest::READABLE, || shared.udp.recv(socket.into(), &mut iovs, metas))
        } else {
            shared.udp.recv(socket.into(), &mut iovs, metas)
        };
        let count = match received {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            // ICMP errors for earlier sends surface here on some systems: not ours to fail on.
            Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted) => continue,
            Err(e) => return Err(e),
        };
        drop(iovs);
        let mut st = shared.lock();
        let now = shared.now();
        let mut response = [0u8; 64];
        for (meta, buf) in metas.iter().take(count).zip(storage.chunks(RECV_BUF)) {
            let stride = meta.stride.max(1);
            // With GRO one buffer holds several datagrams of `stride` bytes (the last may be shorter).
            for datagram in buf[..meta.len].chunks(stride) {
                match st.proto.handle_datagram(now, normalize(meta.addr), datagram, &mut response) {
                    Some(DatagramEvent::NewConnection(incoming)) => {
                        // The endpoint already refused what exceeds max_connections; a server takes the rest.
                        if let Ok(handle) = st.proto.accept(incoming) {
                            st.waiters.insert(handle, Waiters::default());
                            st.accept_queue.push_back(handle);
                            st.accept_waiter.wake();
                        }
                    }
                    Some(DatagramEvent::Response { destination, transmit }) => {
                        st.responses.push((destination, response[..transmit.size].to_vec()));
                    }
                    Some(DatagramEvent::Connection(_)) | None => {}
                }
            }
        }
    }
    Ok(())
}

/// IPv4 peers of a dual-stack socket appear as v4-mapped v6 addresses; use the v4 form consistently.
fn normalize(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

fn collect_transmits(
    st: &mut State,
    now: fencepost_proto::Instant,
    scratch: &mut [u8],
    batches: &mut Vec<Batch>,
    spare: &mut Vec<Vec<u8>>,
    max_segments: usize,
) {
    while let Some((destination, transmit)) = st.proto.poll_transmit(now, scratch) {
        add_to_batches(batches, spare, destination, &scratch[..transmit.size], max_segments);
    }
}

/// Appends a datagram to the last batch if GSO can carry it there, or starts a new batch.
fn add_to_batches(batches: &mut Vec<Batch>, spare: &mut Vec<Vec<u8>>, destination: SocketAddr, datagram: &[u8], max_segments: usize) {
    let joins = batches.last().is_some_and(|b| {
        b.destination == destination
            && b.count < max_segments
            && datagram.len() <= b.segment
            // Only the last segment of a GSO send may be short.
            && b.data.len() == b.count * b.segment
            && b.data.len() + datagram.len() <= 65_000
    });
    if joins {
        let b = batches.last_mut().expect("checked above");
        b.data.extend_from_slice(datagram);
        b.count += 1;
    } else {
        let mut data = spare.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(datagram);
        batches.push(Batch { destination, data, segment: datagram.len(), count: 1 });
    }
}

async fn send(shared: &Shared, socket: &tokio::net::UdpSocket, batch: &Batch) -> io::Result<()> {
    let transmit = Transmit {
        destination: batch.destination,
        ecn: None,
        contents: &batch.data,
        segment_size: (batch.count > 1).then_some(batch.segment),
        src_ip: None,
    };
    loop {
        match socket.try_io(Interest::WRITABLE, || shared.udp.try_send(socket.into(), &transmit)) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => socket.writable().await?,
            Err(e) => return Err(e),
        }
    }
}

/// Moves the core's events to the tasks waiting on them, and forgets connections
/// that are finished and no longer held. Only connections with news are visited.
fn dispatch(st: &mut State, closing: &mut WakerSet) {
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
            _ => {
                st.proto.remove(handle);
                st.waiters.remove(&handle);
            }
        }
    }
}

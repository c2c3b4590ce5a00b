//! The endpoint's driver task: socket in, core, socket out, timers, wake-ups.

use crate::{Shared, State, Waiters};
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

/// Datagrams for one destination, of one size (the last may be shorter), sent in one
/// system call with generic segmentation offload when there are several.
struct Batch {
    destination: SocketAddr,
    data: Vec<u8>,
    segment: usize,
    count: usize,
}

pub(crate) async fn run(shared: Arc<Shared>) {
    let mut storage = vec![0u8; RECV_BUF * BATCH_SIZE];
    let mut metas = vec![RecvMeta::default(); BATCH_SIZE];
    let mut scratch = vec![0u8; 65_536];
    let mut batches: Vec<Batch> = Vec::new();
    let mut spare: Vec<Vec<u8>> = Vec::new();
    let max_segments = shared.udp.max_gso_segments().max(1);
    loop {
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
            dispatch(&mut st);
            st.proto.poll_timeout()
        };
        for batch in batches.drain(..) {
            if let Err(e) = send(&shared, &batch).await {
                // A datagram the kernel refuses (a vanished route, ICMP feedback) is a lost
                // packet to the transport, which recovers; only a dead socket stops us.
                if is_fatal(&e) {
                    stop(&shared, format!("socket error: {e}"));
                    return;
                }
            }
            spare.push(batch.data);
        }
        let sleep_until = deadline.map_or_else(
            || tokio::time::Instant::now() + std::time::Duration::from_secs(3600),
            |t| tokio::time::Instant::from_std(shared.epoch + std::time::Duration::from_micros(t.total_micros())),
        );
        tokio::select! {
            ready = shared.socket.readable() => {
                if let Err(e) = ready {
                    stop(&shared, format!("socket error: {e}"));
                    return;
                }
                if let Err(e) = receive(&shared, &mut storage, &mut metas) {
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
fn receive(shared: &Shared, storage: &mut [u8], metas: &mut [RecvMeta]) -> io::Result<()> {
    for _ in 0..RECV_ROUNDS {
        let mut iovs: Vec<IoSliceMut<'_>> = storage.chunks_mut(RECV_BUF).map(IoSliceMut::new).collect();
        let received = shared.socket.try_io(Interest::READABLE, || shared.udp.recv((&shared.socket).into(), &mut iovs, metas));
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

async fn send(shared: &Shared, batch: &Batch) -> io::Result<()> {
    let transmit = Transmit {
        destination: batch.destination,
        ecn: None,
        contents: &batch.data,
        segment_size: (batch.count > 1).then_some(batch.segment),
        src_ip: None,
    };
    loop {
        match shared.socket.try_io(Interest::WRITABLE, || shared.udp.try_send((&shared.socket).into(), &transmit)) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => shared.socket.writable().await?,
            Err(e) => return Err(e),
        }
    }
}

/// Moves the core's events to the tasks waiting on them, and forgets connections
/// that are finished and no longer held. Only connections with news are visited.
fn dispatch(st: &mut State) {
    while let Some((handle, event)) = st.proto.poll_event() {
        let Some(w) = st.waiters.get_mut(&handle) else { continue };
        match event {
            Event::Connected => w.connected.wake(),
            Event::Readable | Event::StreamFinished => w.read.wake(),
            Event::Writable => w.write.wake(),
            Event::Closed => {
                w.read.wake();
                w.closed.wake();
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

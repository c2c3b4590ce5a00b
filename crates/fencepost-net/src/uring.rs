//! The blocking endpoint's wait for a datagram: one io_uring receive, collected by one
//! system call that also sleeps until it completes or the call's deadline passes.
//!
//! Waiting in `epoll_pwait2` and then receiving takes two system calls per wake-up, where a
//! TCP socket's blocking `read` takes one. The socket's own receive timeout would make it
//! one too, but the kernel counts that timeout in scheduler ticks (a 100 µs timeout slept
//! 6-8 ms here), which would make every timer late. A receive queued on a ring, and
//! `io_uring_enter` waiting for its completion with a timeout in nanoseconds, gives both;
//! with the ring's work deferred to the thread that waits (`DEFER_TASKRUN`, Linux 6.1) the
//! datagram is copied within that same call.
//!
//! Where the ring cannot be had (an older kernel, io_uring turned off by
//! `kernel.io_uring_disabled` or refused by a seccomp policy, as container runtimes often
//! do) the endpoint waits with epoll instead.

use crate::sockio::RecvSlot;
use io_uring::{opcode, types, IoUring};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// The receive's tag on the ring, and the cancellation's.
const RECV: u64 = 1;
const CANCEL: u64 = 2;

/// One receive at a time on its own ring, into a buffer the ring owns.
pub(crate) struct RingReceiver {
    ring: IoUring,
    fd: RawFd,
    /// The receive's buffer and header: the kernel writes into them while the receive is on
    /// the ring, so they are boxed (they never move) and outlive it (see `Drop`).
    buf: Box<[u8]>,
    slot: Box<RecvSlot>,
    in_flight: bool,
}

/// A datagram (or, with GRO, several of `stride` bytes) in the receiver's buffer.
pub(crate) struct Received {
    pub len: usize,
    pub from: SocketAddr,
    pub stride: usize,
}

impl RingReceiver {
    /// A ring receiving from `socket` into a buffer of `buf_len` bytes, or why there is none.
    pub(crate) fn new(socket: &UdpSocket, buf_len: usize) -> io::Result<RingReceiver> {
        let ring = IoUring::builder().setup_single_issuer().setup_defer_taskrun().build(4)?;
        if !ring.params().is_feature_ext_arg() {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "io_uring without timed waits (before Linux 5.11)"));
        }
        let mut probe = io_uring::Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        if !probe.is_supported(opcode::RecvMsg::CODE) || !probe.is_supported(opcode::AsyncCancel::CODE) {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "io_uring without recvmsg"));
        }
        let mut buf = vec![0u8; buf_len].into_boxed_slice();
        let slot = Box::new(RecvSlot::new(&mut buf));
        Ok(RingReceiver { ring, fd: socket.as_raw_fd(), buf, slot, in_flight: false })
    }

    /// Waits up to `timeout` (`None`: without limit) for a datagram. `Ok(None)`: the time
    /// passed (or a signal came) first; the receive stays queued for the next wait.
    pub(crate) fn wait(&mut self, timeout: Option<Duration>) -> io::Result<Option<Received>> {
        if !self.in_flight {
            let entry = opcode::RecvMsg::new(types::Fd(self.fd), self.slot.prepare()).build().user_data(RECV);
            // SAFETY: the header and the buffer and storage it points to are boxed and stay
            // untouched until the receive's completion is read here or in `Drop`.
            unsafe { self.ring.submission().push(&entry) }.map_err(|_| io::Error::other("the io_uring submission queue is full"))?;
            self.in_flight = true;
        }
        let entered = match timeout {
            Some(t) => {
                let ts = types::Timespec::from(t);
                self.ring.submitter().submit_with_args(1, &types::SubmitArgs::new().timespec(&ts))
            }
            None => self.ring.submitter().submit_and_wait(1),
        };
        match entered {
            Ok(_) => {}
            // The time passed, a signal came, or completions wait to be read: look at them.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
            Err(e) => return Err(e),
        }
        let Some(done) = self.ring.completion().next() else { return Ok(None) };
        debug_assert_eq!(done.user_data(), RECV);
        self.in_flight = false;
        let result = done.result();
        if result < 0 {
            return Err(io::Error::from_raw_os_error(-result));
        }
        let len = result as usize;
        Ok(Some(Received { len, from: self.slot.source()?, stride: self.slot.stride().unwrap_or(len) }))
    }

    /// The buffer the last datagram came into.
    pub(crate) fn buffer(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Drop for RingReceiver {
    fn drop(&mut self) {
        if !self.in_flight {
            return;
        }
        // The kernel may still write into the buffer: cancel the receive and see it end
        // before the buffer is freed.
        let cancel = opcode::AsyncCancel::new(RECV).build().user_data(CANCEL);
        // SAFETY: a cancellation carries no buffer.
        let cancelling = unsafe { self.ring.submission().push(&cancel) }.is_ok();
        let mut ended = false;
        for _ in 0..if cancelling { 100 } else { 0 } {
            let ts = types::Timespec::from(Duration::from_millis(10));
            let _ = self.ring.submitter().submit_with_args(1, &types::SubmitArgs::new().timespec(&ts));
            if self.ring.completion().any(|c| c.user_data() == RECV) {
                ended = true;
                break;
            }
        }
        if !ended {
            // Never seen to end: leak the memory rather than free what the kernel may write.
            std::mem::forget(std::mem::take(&mut self.buf));
            std::mem::forget(std::mem::replace(&mut self.slot, Box::new(RecvSlot::new(&mut []))));
        }
    }
}

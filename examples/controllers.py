"""The congestion-control notebook's sender strategies as fencepost controllers
written in Python (shared/seeds/congestion-control-notebook.txt).

    .venv/bin/python examples/controllers.py
    fencepost sim --cc python:examples/controllers.py:NotebookTahoe --trace 2.64mbps-poisson.trace ...

Windows are in packets, as in the notebook.
"""

import fencepost


class FixedWindow(fencepost.Controller):
    """The notebook's FixedWindowStrategy: a constant window, whatever happens."""

    def __init__(self, window: int = 10) -> None:
        self.window = window


class Tahoe(fencepost.Controller):
    """The notebook's TahoeStrategy, as RFC 5681 has it: slow start to a threshold,
    then one packet per window; a loss or timeout halves the threshold (of the
    flight) and restarts from one packet. Like fencepost's built-in tahoe it
    counts acknowledged bytes, at most two packets per ack in slow start, and
    only those of packets sent after the latest loss (``ack.new_bytes``)."""

    def __init__(self, slow_start_thresh: float = float("inf"), initial_cwnd: float = 4) -> None:
        self.window = initial_cwnd
        self.ssthresh = slow_start_thresh
        self.credit = 0.0

    def on_ack(self, ack) -> None:
        if ack.app_limited or ack.new_bytes == 0:
            return
        packets = ack.new_bytes / ack.mss
        if self.window < self.ssthresh:
            self.window = min(self.window + min(packets, 2), max(self.ssthresh, self.window))
        else:
            self.credit += packets
            while self.credit >= self.window:
                self.credit -= self.window
                self.window += 1

    @property
    def wants_every_ack(self) -> bool:
        # As the built-in tahoe: every ack in slow start, an ack per eighth of the flight after.
        return self.window < self.ssthresh

    def _collapse(self, in_flight_packets: float) -> None:
        self.ssthresh = max(in_flight_packets / 2, 2)
        self.window = 1
        self.credit = 0.0

    def on_loss(self, loss) -> None:
        self._collapse(loss.in_flight / loss.mss)

    def on_timeout(self, loss) -> None:
        self._collapse(loss.in_flight / loss.mss)


class NotebookTahoe(Tahoe):
    """TahoeStrategy(10, 1), the notebook's run."""

    def __init__(self) -> None:
        super().__init__(slow_start_thresh=10, initial_cwnd=1)


def main() -> None:
    options = dict(rate="2640kbit", delay="88ms", queue="26400", time="60s", seed=1)
    for label, cc in [("python FixedWindow(10)", FixedWindow), ("python Tahoe(10, 1)", NotebookTahoe),
                      ("built-in tahoe:iw=1,ssthresh=10", "tahoe:iw=1,ssthresh=10,pacing=off")]:
        r = fencepost.sim.run(cc=cc, **options)
        print(f"{label:34} goodput {r.goodput_bps / 8:10,.0f} B/s, RTT {r.rtt_mean_ms:6.1f} ms, retransmissions {r.retransmissions}")


if __name__ == "__main__":
    main()

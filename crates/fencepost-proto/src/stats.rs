//! Counters a connection keeps about itself, named as the seed documents name them.

/// Everything counted on one side of a connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectionStats {
    /// Every datagram this side sent, of every type.
    pub packets_sent: u64,
    pub bytes_sent: u64,
    /// Data and FIN packets, first transmissions and retransmissions (not redundant copies).
    pub data_packets_sent: u64,
    pub retransmissions: u64,
    pub acks_sent: u64,
    pub keepalives_sent: u64,
    /// Those of the keepalives that probed the peer's closed window (the retransmission
    /// timer's, or a tick's), not the idle ones.
    pub window_probes: u64,
    /// Those sent while packets were in flight: tail probes, whose answer shows what was
    /// sent before them and is still unacknowledged lost.
    pub tail_probes: u64,
    pub handshakes_sent: u64,
    pub resets_sent: u64,
    /// Repair packets (copies, FEC) sent by the redundancy stage.
    pub redundant_packets_sent: u64,
    /// Feedback packets sent to a peer that sends repairs.
    pub feedback_sent: u64,
    /// Requests for an ack frequency sent to the peer (a data sender's, when its flight grows or shrinks).
    pub ack_frequency_requests_sent: u64,
    /// A data sender's trials of sparser acks (the acks' own path seemed to limit the rate),
    /// and those kept because the rate rose or the queue of acks drained.
    pub sparser_ack_trials: u64,
    pub sparser_ack_trials_kept: u64,
    /// Far acks sent: the fence beyond an ack's bitmap, while packets were held that far out.
    pub far_acks_sent: u64,

    pub packets_received: u64,
    pub bytes_received: u64,
    pub data_packets_received: u64,
    /// FEC repair packets received, and the data packets they let this side rebuild.
    pub repairs_received: u64,
    pub packets_rebuilt: u64,
    /// Our redundancy sends repair packets but the peer's handshake said it takes none,
    /// so none were sent.
    pub repairs_refused_by_peer: bool,
    /// Data packets that arrived although this side already held them.
    pub duplicate_packets_received: u64,
    pub acks_received: u64,
    /// Times this side held its receive window down because the host's socket overflowed
    /// while the connection was receiving (see `Connection::on_socket_overflow`).
    pub socket_overflow_cuts: u64,
    /// Data packets the peer acknowledged for the first time, in order or beyond a hole:
    /// how far a transfer has got however its holes stand.
    pub packets_acknowledged: u64,
    /// Acks whose fence base did not advance while data was outstanding.
    pub duplicate_acks_received: u64,
    /// Datagrams that did not parse.
    pub malformed_packets: u64,
    /// Datagrams packet protection refused to open (forged, corrupted, another key).
    pub unauthenticated_packets: u64,
    /// Protected packets that authenticated once already (replayed, or duplicated on the way).
    pub replayed_packets: u64,
    /// Retry tokens taken from the server (version 2 address validation).
    pub retries_received: u64,
    /// Well-formed packets for another connection id (an old connection, or an off-path sender).
    pub foreign_packets: u64,
    /// Packets that contradicted the protocol (data past the FIN, acks for unsent data).
    pub protocol_violations: u64,
    /// Data packets dropped because they were beyond the advertised window (or the receive buffer).
    pub beyond_window_packets: u64,
    /// Data packets dropped because the endpoint's buffer budget was spent.
    pub over_budget_packets: u64,
    /// Times the FEC decoder forgot the packets it kept for repairs because the endpoint's
    /// buffer budget was spent (repairs over them are then useless; resends recover).
    pub repair_state_shed: u64,

    /// Transmissions presumed lost (by fence holes, duplicate acks or timeouts).
    pub packets_lost: u64,
    /// Retransmissions that proved needless: the original had arrived (the path reorders).
    pub spurious_retransmissions: u64,
    pub congestion_events: u64,
    /// Retransmission timer expiries, those answered with new data included.
    pub retransmission_timeouts: u64,
    /// Of those, the first timeouts on a path that had lost nothing lately, whose probes
    /// carried new data and declared nothing lost (see `Connection::on_retransmission_timeout`).
    pub timeouts_probed_with_new_data: u64,

    pub bytes_written: u64,
    pub bytes_read: u64,
}

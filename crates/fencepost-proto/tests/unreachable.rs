//! What an ICMP error about a peer's address does to the endpoint's connections
//! (`Endpoint::on_unreachable`): a client's handshake that has heard nothing ends at once,
//! an established client's ends once port unreachable reports have come for a second with
//! nothing from its peer, and a server takes no ICMP error as its client's word.

use fencepost_proto::{ConnectionError, DatagramEvent, Duration, Endpoint, EndpointConfig, Event, Instant, State, TransportConfig, Unreachable, PORT_CLOSED_AFTER};

/// Runs the two endpoints (client at address 1, server at 0) for `steps` rounds of a
/// millisecond without loss; returns the time after them.
fn exchange(client: &mut Endpoint<u8>, server: &mut Endpoint<u8>, mut now: Instant, steps: usize) -> Instant {
    let (mut buf, mut response) = (vec![0u8; 2048], vec![0u8; 2048]);
    for _ in 0..steps {
        now += Duration::from_millis(1);
        client.handle_timeout(now);
        server.handle_timeout(now);
        while let Some((_, t)) = client.poll_transmit(now, &mut buf) {
            match server.handle_datagram(now, 1, &buf[..t.size], &mut response) {
                Some(DatagramEvent::NewConnection(incoming)) => {
                    server.accept(incoming).unwrap();
                }
                // The server's Retry, sent without a connection.
                Some(DatagramEvent::Response { transmit, .. }) => {
                    client.handle_datagram(now, 0, &response[..transmit.size], &mut buf);
                }
                _ => {}
            }
        }
        while let Some((_, t)) = server.poll_transmit(now, &mut buf) {
            client.handle_datagram(now, 0, &buf[..t.size], &mut response);
        }
    }
    now
}

/// A client (address 1) and a server (address 0) with one established connection between
/// them: the endpoints, the client's handle and the time after the handshake.
fn established() -> (Endpoint<u8>, Endpoint<u8>, fencepost_proto::ConnectionHandle, Instant) {
    let mut client = Endpoint::new(EndpointConfig::client(TransportConfig::default()), 1);
    let mut server = Endpoint::new(EndpointConfig::server(TransportConfig::default()), 2);
    let live = client.connect(Instant::from_millis(1), 0u8);
    let now = exchange(&mut client, &mut server, Instant::from_millis(1), 20);
    assert!(client.connection(live).unwrap().is_established(), "{:?}", client.connection(live).unwrap().state());
    (client, server, live, now)
}

#[test]
fn an_unanswered_handshake_ends_and_an_answered_one_goes_on() {
    // One connection to the server (address 0), which answers, and one to address 9,
    // where nothing does.
    let (mut client, mut server, live, now) = established();
    let nobody = client.connect(now, 9u8);
    let mut buf = vec![0u8; 2048];
    while client.poll_transmit(now, &mut buf).is_some() {}

    // A second connection to the server that has had the server's Retry and nothing more:
    // still in its handshake, but answered.
    let retried = client.connect(now, 0u8);
    let (mut response, mut scratch) = (vec![0u8; 2048], vec![0u8; 2048]);
    while let Some((_, t)) = client.poll_transmit(now, &mut buf) {
        if let Some(DatagramEvent::Response { transmit, .. }) = server.handle_datagram(now, 1, &buf[..t.size], &mut response) {
            client.handle_datagram(now, 0, &response[..transmit.size], &mut scratch);
        }
    }
    assert_eq!(client.connection(retried).unwrap().state(), State::Handshake);

    // An error about the server's address ends neither (that peer has answered).
    assert_eq!(client.on_unreachable(now, &0, Unreachable::Port), 0);
    assert!(client.connection(live).unwrap().is_established());
    assert_eq!(client.connection(retried).unwrap().state(), State::Handshake);
    // One about address 9 ends that connection's handshake, with the reason given.
    assert_eq!(client.on_unreachable(now, &9, Unreachable::Port), 1);
    assert_eq!(client.connection(nobody).unwrap().state(), State::Lost);
    assert_eq!(client.connection(nobody).unwrap().error(), Some(&ConnectionError::Unreachable(Unreachable::Port.reason())));
    let mut lost = Vec::new();
    while let Some((handle, event)) = client.poll_event() {
        if let Event::ConnectionLost(e) = event {
            lost.push((handle, e));
        }
    }
    assert_eq!(lost, vec![(nobody, ConnectionError::Unreachable(Unreachable::Port.reason()))]);
    assert_eq!(client.stats().unreachable_reports, 2);

    // A server's connection never ends on one (a NAT that forgot the client's mapping
    // answers with them, and the client may come back from a new port).
    let accepted: Vec<_> = server.handles().collect();
    assert_eq!(accepted.len(), 1);
    assert_eq!(server.on_unreachable(now, &1, Unreachable::Port), 0);
    assert!(server.connection(accepted[0]).unwrap().state() != State::Lost);
    // And the live connection still carries data both ways.
    client.connection_mut(live).unwrap().write(b"still here").unwrap();
    exchange(&mut client, &mut server, now, 20);
    let mut got = [0u8; 32];
    let n = server.connection_mut(accepted[0]).unwrap().read(&mut got).unwrap();
    assert_eq!(&got[..n], b"still here");
}

#[test]
fn a_closed_port_ends_an_established_client_only_after_a_silent_second() {
    let (mut client, mut server, live, mut now) = established();
    let half = Duration::from_micros(PORT_CLOSED_AFTER.total_micros() / 2);

    // Host unreachable (a route that may come back) never ends it, however long it lasts.
    for _ in 0..8 {
        assert_eq!(client.on_unreachable(now, &0, Unreachable::Host), 0);
        now += half;
    }
    // Port unreachable, then the peer's packets: the count starts again after them.
    assert_eq!(client.on_unreachable(now, &0, Unreachable::Port), 0);
    now += half;
    assert_eq!(client.on_unreachable(now, &0, Unreachable::Port), 0);
    client.connection_mut(live).unwrap().write(b"are you there").unwrap();
    now = exchange(&mut client, &mut server, now, 30);
    now += half + Duration::from_millis(10);
    assert_eq!(client.on_unreachable(now, &0, Unreachable::Port), 0, "the peer answered since the first report");
    assert!(client.connection(live).unwrap().is_established());
    // Reports for PORT_CLOSED_AFTER with nothing from the peer: it ends, saying why.
    now += half;
    assert_eq!(client.on_unreachable(now, &0, Unreachable::Port), 0);
    now += half;
    assert_eq!(client.on_unreachable(now, &0, Unreachable::Port), 1);
    let error = client.connection(live).unwrap().error().cloned();
    assert!(matches!(error, Some(ConnectionError::PortClosed { silent }) if silent >= PORT_CLOSED_AFTER), "{error:?}");
    assert!(error.unwrap().to_string().contains("the peer's port closed"));
}

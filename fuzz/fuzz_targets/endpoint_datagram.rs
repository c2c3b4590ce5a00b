#![no_main]
//! A server endpoint and its connections fed arbitrary datagrams: counted and dropped, never a panic.

use fencepost_proto::{DatagramEvent, Endpoint, EndpointConfig, Instant, TransportConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut endpoint: Endpoint<u8> = Endpoint::new(EndpointConfig::server(TransportConfig::default()), 1);
    let mut buf = vec![0u8; 2048];
    // Split the input into datagrams at 0xff 0xfe markers so one input can hold a conversation.
    for (i, datagram) in data.split(|&b| b == 0xfe).enumerate() {
        let now = Instant::from_millis(i as u64);
        if let Some(DatagramEvent::NewConnection(incoming)) = endpoint.handle_datagram(now, (i % 3) as u8, datagram, &mut buf) {
            let _ = endpoint.accept(incoming);
        }
        endpoint.handle_timeout(now);
        while endpoint.poll_transmit(now, &mut buf).is_some() {}
        while endpoint.poll_event().is_some() {}
    }
});

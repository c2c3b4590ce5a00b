//! Seals and opens of one full-sized packet body with the two AEAD implementations the
//! crate can link, `ring`'s and AWS-LC's (through `aws-lc-rs`), interleaved round by
//! round on the same key and buffer: the figures behind the packet cipher's choice
//! (docs/speed.md, "The packet cipher"). Usage: aead_speed [BODY_BYTES] [PACKETS] [ROUNDS]
use std::time::Instant;

fn main() {
    let arg = |i: usize, default: usize| std::env::args().nth(i).map_or(default, |s| s.parse().unwrap_or_else(|_| panic!("argument {i}: expected a whole number, got {s}")));
    let (len, packets, rounds) = (arg(1, 1_400), arg(2, 200_000), arg(3, 6));
    let key = [7u8; 32];
    let aad = [1u8; 14];
    let ring_key = ring::aead::LessSafeKey::new(ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, &key).expect("a 32-byte key"));
    let lc_key = aws_lc_rs::aead::LessSafeKey::new(aws_lc_rs::aead::UnboundKey::new(&aws_lc_rs::aead::AES_256_GCM, &key).expect("a 32-byte key"));
    let nonce = |i: usize| {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&(i as u64).to_be_bytes());
        n
    };
    // One sealed body (the same bytes from either: AES-256-GCM is one function).
    let mut sealed = vec![3u8; len];
    let tag = ring_key.seal_in_place_separate_tag(ring::aead::Nonce::assume_unique_for_key(nonce(0)), ring::aead::Aad::from(&aad), &mut sealed).expect("seal");
    sealed.extend_from_slice(tag.as_ref());
    let mut check = sealed.clone();
    lc_key.open_in_place(aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce(0)), aws_lc_rs::aead::Aad::from(&aad), &mut check).expect("AWS-LC opens what ring sealed");
    let mut body = vec![3u8; len];
    let mut work = sealed.clone();
    let per_packet = |t: Instant| t.elapsed().as_secs_f64() / packets as f64 * 1e9;
    println!("AES-256-GCM, {len}-byte bodies, {packets} packets a round: ns per packet");
    println!("round  seal ring  seal AWS-LC  open ring  open AWS-LC  (each open copies the sealed body back first)");
    for round in 1..=rounds {
        let t = Instant::now();
        for i in 0..packets {
            let tag = ring_key.seal_in_place_separate_tag(ring::aead::Nonce::assume_unique_for_key(nonce(i)), ring::aead::Aad::from(&aad), &mut body).expect("seal");
            std::hint::black_box(tag.as_ref());
        }
        let seal_ring = per_packet(t);
        let t = Instant::now();
        for i in 0..packets {
            let tag = lc_key.seal_in_place_separate_tag(aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce(i)), aws_lc_rs::aead::Aad::from(&aad), &mut body).expect("seal");
            std::hint::black_box(tag.as_ref());
        }
        let seal_lc = per_packet(t);
        let t = Instant::now();
        for _ in 0..packets {
            work.copy_from_slice(&sealed);
            let plain = ring_key.open_in_place(ring::aead::Nonce::assume_unique_for_key(nonce(0)), ring::aead::Aad::from(&aad), &mut work).expect("open");
            std::hint::black_box(plain.len());
        }
        let open_ring = per_packet(t);
        let t = Instant::now();
        for _ in 0..packets {
            work.copy_from_slice(&sealed);
            let plain = lc_key.open_in_place(aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce(0)), aws_lc_rs::aead::Aad::from(&aad), &mut work).expect("open");
            std::hint::black_box(plain.len());
        }
        let open_lc = per_packet(t);
        println!("{round:>5}  {seal_ring:>9.0}  {seal_lc:>11.0}  {open_ring:>9.0}  {open_lc:>11.0}");
    }
}

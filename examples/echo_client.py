"""The seed article's benchmark client over fencepost: 1000 random messages of
200-400 bytes, 2-20 ms apart, echoed back and checked by SHA-256.
Run: python examples/echo_client.py 127.0.0.1 5201 [MESSAGES]"""

import hashlib
import random
import sys
import threading
import time

import fencepost


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    messages = [random.randbytes(random.randrange(200, 400)) for _ in range(count)]
    total = sum(map(len, messages))
    started = time.time()
    with fencepost.connect((host, port)) as sock:
        def send():
            for m in messages:
                sock.sendall(m)
                time.sleep(random.randrange(2, 20) / 1000)

        writer = threading.Thread(target=send)
        writer.start()
        received = hashlib.sha256()
        got = 0
        while got < total:
            data = sock.recv(65536)
            if not data:
                break
            received.update(data)
            got += len(data)
        writer.join()
        sent = hashlib.sha256(b"".join(messages))
        assert received.hexdigest() == sent.hexdigest(), "echo mismatch"
        print(f"sent and received {total} bytes, hashes match: {sent.hexdigest()}")
        print(f"packets sent: {sock.stats()['packets_sent']}, time to completion: {time.time() - started:.2f} s")


if __name__ == "__main__":
    main()

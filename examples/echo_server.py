"""The seed article's echo server over fencepost: everything a client sends comes back.
Run: python examples/echo_server.py 127.0.0.1 5201"""

import sys
import threading

import fencepost


def serve(sock):
    with sock:
        while data := sock.recv(65536):
            sock.sendall(data)


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    with fencepost.listen((host, port)) as listener:
        print(f"echo server on {listener.getsockname()}", flush=True)
        while True:
            sock, peer = listener.accept()
            threading.Thread(target=serve, args=(sock,), daemon=True).start()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass

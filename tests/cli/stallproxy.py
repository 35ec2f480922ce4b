#!/usr/bin/env python3
"""stallproxy.py - a TCP proxy on loopback that a test can freeze.

    stallproxy.py TARGET_PORT PORT_FILE [PORT]

Listens on 127.0.0.1 on a free port (or PORT: a proxy started again where
one was, as a server restarts), writes that port to PORT_FILE once it
accepts, and forwards every connection to 127.0.0.1:TARGET_PORT, both
ways, byte for byte.  A test freezes the path with `kill -STOP PID` (a
network partition: the kernel still completes new TCP handshakes into the
listen backlog and buffers what clients send, but nothing reaches the
server and nothing comes back) and thaws it with `kill -CONT PID`.  It
exits on SIGTERM or SIGINT, closing every connection.

One thread accepts; each connection has one thread per direction.  A
connection whose one side closes is closed on both.  The stall tests
(tests/cli/test_store_stall.sh) use it, and test_listen_restart.sh stops
and starts it as a store restart.
"""
import os
import signal
import socket
import sys
import threading


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(client, target):
    try:
        upstream = socket.create_connection(("127.0.0.1", target))
    except OSError:
        client.close()
        return
    for s in (client, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    a = threading.Thread(target=pump, args=(client, upstream), daemon=True)
    b = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    a.start()
    b.start()
    a.join()
    b.join()
    client.close()
    upstream.close()


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: stallproxy.py TARGET_PORT PORT_FILE [PORT]")
    target = int(sys.argv[1])
    # the handler runs in the main thread, between its accept() waits: a
    # signal the kernel hands to a forwarding thread interrupts no
    # accept(), so the wait is cut into 0.2 s pieces
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", int(sys.argv[3]) if len(sys.argv) == 4 else 0))
    ls.listen(128)
    ls.settimeout(0.2)
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write("%d\n" % ls.getsockname()[1])
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    while True:
        try:
            c, _ = ls.accept()
        except socket.timeout:
            continue
        c.settimeout(None)
        threading.Thread(target=serve, args=(c, target), daemon=True).start()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass

"""Delays, jitters, reorders and drops the packets an iptables NFQUEUE rule hands it, run in the
namespace of that rule: netem's link impairments done in user space, for kernels built without
`sch_netem` (as the machines these tests run on are). Each packet gets its verdict (accept, or
drop for a lost one) when its delay is over; verdicts may be given out of order, which is how
jitter and `--reorder-pct` reorder packets. Random choices come from `--seed`, so a run
replays.

Speaks nfnetlink_queue over a raw netlink socket (linux/netfilter/nfnetlink_queue.h), standard
library only. Prints `ready` once bound; stops on SIGTERM, accepting what it still holds."""
import argparse
import errno
import heapq
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
SO_RCVBUFFORCE = 33
# Packets the kernel holds for this queue before it drops more (netem's default limit is 1000).
QUEUE_MAXLEN = 10000


def attribute(kind, data):
    length = 4 + len(data)
    return struct.pack("=HH", length, kind) + data + b"\0" * (-length % 4)


def message(kind, flags, queue, attributes, seq=0):
    payload = struct.pack("!BBH", socket.AF_UNSPEC, 0, queue) + b"".join(attributes)
    return struct.pack("=IHHII", 16 + len(payload), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + payload


def packet_ids(data):
    """The packet ids in a buffer of netlink messages; an error answer raises."""
    offset = 0
    while offset + 16 <= len(data):
        length, kind, _, _, _ = struct.unpack_from("=IHHII", data, offset)
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", data, offset + 16)
            if code:
                raise OSError(-code, f"nfnetlink_queue refused a request: error {-code}")
        elif kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            at = offset + 20
            while at + 4 <= offset + length:
                alen, atype = struct.unpack_from("=HH", data, at)
                if alen < 4:
                    break
                if atype & 0x7FFF == NFQA_PACKET_HDR:
                    yield struct.unpack_from("!I", data, at + 4)[0]
                at += (alen + 3) & ~3
        offset += (length + 3) & ~3


class Queue:
    def __init__(self, number):
        self.number = number
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
        self.sock.bind((0, 0))
        self.configure(1, attribute(NFQA_CFG_CMD, struct.pack("!BBH", NFQNL_CFG_CMD_BIND, 0, 0)))
        self.configure(2, attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)))
        self.configure(3, attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN)))

    def configure(self, seq, attr):
        self.sock.send(message(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, self.number, [attr], seq))
        list(packet_ids(self.sock.recv(65536)))

    def verdict(self, packet_id, verdict):
        self.sock.send(message(NFQNL_MSG_VERDICT, NLM_F_REQUEST, self.number,
                               [attribute(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id))]))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queue", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--jitter-ms", type=float, default=0.0, help="uniform in +-jitter around the delay")
    ap.add_argument("--reorder-pct", type=float, default=0.0, help="packets sent at once, ahead of delayed ones")
    ap.add_argument("--loss-pct", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    queue = Queue(args.queue)
    held = []
    serial = 0
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    print("ready", flush=True)
    while not stopping:
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, _, packet_id, verdict = heapq.heappop(held)
            queue.verdict(packet_id, verdict)
        wait = max(0.0, held[0][0] - now) if held else 0.5
        try:
            readable, _, _ = select.select([queue.sock], [], [], wait)
        except InterruptedError:
            continue
        if not readable:
            continue
        try:
            data = queue.sock.recv(1 << 20)
        except OSError as e:
            if e.errno != errno.ENOBUFS:
                raise
            # A burst beyond the socket's buffer: the kernel dropped the packets it could not
            # hand over, as a full netem queue drops them. The delayer goes on.
            continue
        for packet_id in packet_ids(data):
            if rng.random() * 100 < args.loss_pct:
                queue.verdict(packet_id, NF_DROP)
                continue
            if rng.random() * 100 < args.reorder_pct:
                queue.verdict(packet_id, NF_ACCEPT)
                continue
            delay = max(0.0, args.delay_ms + rng.uniform(-args.jitter_ms, args.jitter_ms)) / 1000
            serial += 1
            heapq.heappush(held, (time.monotonic() + delay, serial, packet_id, NF_ACCEPT))
    for _, _, packet_id, verdict in held:
        queue.verdict(packet_id, verdict)
    sys.exit(0)


if __name__ == "__main__":
    main()

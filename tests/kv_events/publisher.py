"""vLLM's own KV-cache event publisher, driven from stdin (tests/kv_events).

Usage: publisher.py PORT REPLAY_PORT

Binds vLLM's `ZmqEventPublisher` (PUB on tcp://*:PORT, replay ROUTER on
tcp://*:REPLAY_PORT) and reads one JSON command a line:

  {"cmd": "store", "hashes": [..], "parent": h | null, "tokens": [..],
   "block_size": n, "bytes": false, "drop": false}
      a BlockStored batch; hashes as ints, or as 32-byte big-endian
      strings with "bytes"; with "drop" the batch is numbered and kept for
      replay but not sent live (a message lost on the way)
  {"cmd": "remove", "hashes": [..]}  a BlockRemoved batch
  {"cmd": "clear"}                   an AllBlocksCleared batch
  {"cmd": "restart"}                 a new publisher on the same ports,
                                     numbering from 0 (a restarted server)
  {"cmd": "exit"}

It prints "ready" once bound, and "ok" once each command's batch has been
sent (or dropped) and kept for replay.
"""

import json
import socket
import sys
import time

from vllm.distributed.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    ZmqEventPublisher,
)


class DroppingSocket:
    """The PUB socket, losing the messages it is told to."""

    def __init__(self, socket):
        self.socket = socket
        self.drop = 0

    def send_multipart(self, frames, *args, **kwargs):
        if self.drop > 0:
            self.drop -= 1
            return None
        return self.socket.send_multipart(frames, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.socket, name)


def start(port, replay_port):
    publisher = ZmqEventPublisher(
        data_parallel_rank=0,
        endpoint=f"tcp://*:{port}",
        replay_endpoint=f"tcp://*:{replay_port}",
    )
    publisher._pub = DroppingSocket(publisher._pub)
    return publisher


def wait_free(*ports):
    """Until the ports a closed publisher held can be bound again (ZeroMQ
    closes its listeners in its I/O thread, after `close` returns): at
    most 5 s."""
    for _ in range(100):
        try:
            for port in ports:
                with socket.socket() as probe:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    probe.bind(("0.0.0.0", port))
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"ports {ports} still taken")


def key(value, as_bytes):
    if value is None:
        return None
    return value.to_bytes(32, "big") if as_bytes else value


def main():
    port, replay_port = int(sys.argv[1]), int(sys.argv[2])
    publisher = start(port, replay_port)
    print("ready", flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        cmd = command["cmd"]
        if cmd == "exit":
            break
        if cmd == "restart":
            publisher.shutdown()
            wait_free(port, replay_port)
            publisher = start(port, replay_port)
            print("ok", flush=True)
            continue
        if cmd == "store":
            as_bytes = command.get("bytes", False)
            event = BlockStored(
                block_hashes=[key(h, as_bytes) for h in command["hashes"]],
                parent_block_hash=key(command.get("parent"), as_bytes),
                token_ids=command["tokens"],
                block_size=command["block_size"],
                lora_id=None,
                medium="GPU",
                lora_name=None,
                group_idx=0,
            )
            if command.get("drop", False):
                publisher._pub.drop += 1
        elif cmd == "remove":
            event = BlockRemoved(block_hashes=command["hashes"], medium="GPU")
        elif cmd == "clear":
            event = AllBlocksCleared()
        else:
            raise SystemExit(f"unknown command {cmd!r}")
        publisher.publish(KVEventBatch(ts=time.time(), events=[event]))
        # The publisher's thread marks each batch done once sent and kept.
        publisher._event_queue.join()
        print("ok", flush=True)
    publisher.shutdown()


if __name__ == "__main__":
    main()

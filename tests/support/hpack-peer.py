"""HPACK reference peer for tests/integration/hpack-differential.test.ts: Debian's python3-hpack.

Reads one JSON request per line on standard input and answers one JSON line each:
  {"op": "new", "session": S, "tableSize": N}         a new encoder and decoder for session S
  {"op": "decode", "session": S, "block": HEX}          -> {"fields": [[NAME_HEX, VALUE_HEX, NEVER], ...]}
  {"op": "encode", "session": S, "fields": [...], "huffman": BOOL}  -> {"block": HEX}
An error is {"error": "..."}. Names and values travel as hex, so that every octet is kept.
"""
import json
import sys

import hpack

sessions = {}


def answer(request):
    op = request["op"]
    if op == "new":
        decoder = hpack.Decoder(max_header_list_size=1 << 30)
        decoder.max_allowed_table_size = request["tableSize"]
        encoder = hpack.Encoder()
        sessions[request["session"]] = (encoder, decoder)
        return {}
    encoder, decoder = sessions[request["session"]]
    if op == "decode":
        fields = decoder.decode(bytes.fromhex(request["block"]), raw=True)
        return {
            "fields": [
                [bytes(f[0]).hex(), bytes(f[1]).hex(), isinstance(f, hpack.NeverIndexedHeaderTuple)]
                for f in fields
            ]
        }
    if op == "encode":
        headers = [
            (hpack.NeverIndexedHeaderTuple if never else hpack.HeaderTuple)(
                bytes.fromhex(name), bytes.fromhex(value)
            )
            for name, value, never in request["fields"]
        ]
        return {"block": encoder.encode(headers, huffman=request.get("huffman", True)).hex()}
    raise ValueError("unknown op " + op)


for line in sys.stdin:
    try:
        out = answer(json.loads(line))
    except Exception as e:  # every refusal of the library is an answer, never the end of the peer
        out = {"error": "%s: %s" % (type(e).__name__, e)}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()

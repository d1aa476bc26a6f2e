"""A gateway's external guard that allows every call, as cheaply as Python can: asyncio streams,
HTTP/1.1 keep-alive, one fixed answer, the signature not checked. For measuring what a guard on
`request` costs toolgate itself (benches/load.sh with GATEWAY_B_EXTRA naming it): the guard's own
CPU is its process's, apart from toolgate's.

    python3 benches/load/allow_guard.py   # prints the port, then serves until killed
"""

import asyncio

ANSWER = b'{"action":"allow"}'
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(ANSWER)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            writer.write(HEAD + ANSWER)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


asyncio.run(main())

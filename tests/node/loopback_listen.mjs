// Preloaded with `node --import` into a server that calls `listen(port)` without a host (such as
// server-everything's Streamable HTTP transport): the server binds 127.0.0.1 only, and once it
// listens prints `LISTENING http://127.0.0.1:<port>/mcp`, the line tests wait for
// (proxy/demo/processes.py ServerProcess). PORT=0 then gives an ephemeral port.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    const port = Number(args[0]);
    const rest = args.slice(1).filter((a) => typeof a === "function");
    this.once("listening", () => {
      process.stdout.write(`LISTENING http://127.0.0.1:${this.address().port}/mcp\n`);
    });
    return listen.call(this, port, "127.0.0.1", ...rest);
  }
  return listen.apply(this, args);
};

// The room of docs/getting-started.md in AssemblyScript: it counts the
// HTTP requests each room gets and relays every text message a socket
// sends to all the room's sockets. Inside the wasmkeep repository it
// imports the SDK by path; a project of your own imports
// "wasmkeep-assemblyscript" (see guest-sdk/assemblyscript/README.md).
import * as wk from "../../../guest-sdk/assemblyscript/index";
export * from "../../../guest-sdk/assemblyscript/exports"; // the ABI's entry points

let hits = 0; // plain globals and heap: they survive hibernation and restarts

wk.handleRequest((r: wk.Request): wk.Response | null => {
  hits++;
  return wk.text(200, wk.room().name + ": " + hits.toString());
});

wk.handleSocketMessage((s: wk.Socket, m: wk.Message): void => {
  if (m.isText()) wk.broadcastUTF8(m.data); // to every socket, the sender included
});

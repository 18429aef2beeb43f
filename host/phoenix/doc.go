// Package phoenix is the host's implementation of the Phoenix Channels
// protocol (the V2 serializer, "vsn=2.0.0"), so that the unmodified
// `phoenix` npm client can talk to rooms. It is pure: it reads no clock,
// does no I/O and starts no goroutines. The socket layer decodes frames
// with it, feeds them to a Session, performs the Actions it returns, and
// writes the frames it is handed; rooms answer through Session methods.
//
// # Frames
//
// A text frame is a JSON array of five elements; a binary frame is a kind
// byte, one length byte per string field, the fields, then the payload to
// the end of the frame. Refs are strings chosen by the client (a counter
// in phoenix.js); the ref of a phx_join becomes the join_ref of every
// later message of that join.
//
//	direction  what                text frame                                          binary frame
//	---------  ------------------  --------------------------------------------------  ---------------------------------------------
//	in         heartbeat           [null, ref, "phoenix", "heartbeat", {}]             (as a message)
//	in         join                [jr, jr, topic, "phx_join", params]                 (as a message)
//	in         leave               [jr, ref, topic, "phx_leave", {}]                   (as a message)
//	in         message             [jr, ref, topic, event, payload]                    0 jrlen reflen toplen evlen jr ref top ev data
//	out        reply               [jr, ref, topic, "phx_reply",                       1 jrlen reflen toplen stlen jr ref top st data
//	                                 {"status": st, "response": resp}]
//	out        heartbeat reply     [null, ref, "phoenix", "phx_reply",                 -
//	                                 {"status":"ok","response":{}}]
//	out        push (one join)     [jr, null, topic, event, payload]                   0 jrlen toplen evlen jr top ev data
//	out        broadcast           [null, null, topic, event, payload]                 2 toplen evlen top ev data
//	out        close by server     [jr, jr, topic, "phx_close", {}]                    -
//	out        topic crashed       [jr, jr, topic, "phx_error", {"reason": why}]       -
//
// phoenix.js sends a binary frame only for a push whose payload is an
// ArrayBuffer, but any client message is accepted in either layout. Kind 0
// means two layouts: from a client it has a ref, from the server it
// has none. A binary frame has no null, so a null ref is written as an
// empty string and read back as null. DecodeText and DecodeBinary refuse
// everything else with sentinel errors (see ErrSyntax and the errors next
// to it); each string field, and the ref fields, are held to 255 bytes
// (MaxTopic, MaxEvent, MaxRef) in both layouts, so a message can always be
// re-encoded either way. Decoded messages do not alias the input buffer.
//
// Encoders append to a caller's slice (AppendReply, AppendPush,
// AppendBroadcast and their binary twins, AppendClose, AppendError,
// AppendHeartbeatReply), so a broadcast is encoded once and the same bytes
// queued on every socket joined to its topic. A JSON payload handed to an
// encoder is checked to be one valid JSON value in valid UTF-8 (a client
// fails the connection on anything else in a text frame); an empty one is
// written as {}.
//
// # The session
//
// A Session holds one socket's joins. Handle turns each decoded client
// message into Actions: ActionSend (a frame for the client), ActionDeliver
// (a join, message or leave for the room) and ActionDrop (a message that
// goes nowhere, with a reason for the metrics). The rules, in short:
//
//   - Heartbeats are answered by the Session itself: they never wake a room.
//   - A join needs a topic that ValidateTopic accepts (non-empty, at most
//     255 bytes of UTF-8 without control characters, not "phoenix", not
//     under ReservedPrefix "wasmkeep:"), a join_ref, a token from the join
//     bucket and room under the topic cap; otherwise it gets an error reply
//     at once. Joining a topic that already has a join (pending or
//     accepted) first closes the old one with phx_close and a leave for the
//     room, as Phoenix does, and then proceeds.
//   - A join that passes these checks is pending until the room answers it with
//     AcceptJoin or RejectJoin. A join the room leaves unanswered when its
//     event returns is refused by AbandonPending: joins fail closed.
//   - A message reaches the room only on a topic whose join was accepted
//     and only with that join's join_ref; a stale join_ref (the client
//     racing a close or a rejoin) is dropped silently, a topic not joined
//     gets the "unmatched topic" error reply. Messages take a token from
//     the message bucket first; over the rate they are dropped unanswered.
//   - A leave is acknowledged at once and, when it names the current join,
//     delivered to the room.
//   - The room's Reply, Push, Close and Crash name the topic and join_ref
//     they mean, so nothing computed for an ended join reaches a later join
//     of the same topic.
//
// Every method returns the frames to write, in order; the host keeps wire
// order by writing them in the order of its calls.
//
// # Defaults
//
// Config's zero value gives: 100 topics per socket (DefaultMaxTopics),
// joins at 10 per second with a burst of 100 (a reconnecting phoenix.js
// client rejoins all its channels at once, so the burst covers a full
// socket), and messages at 100 per second with a burst of 200. Rates are
// token buckets in integer nanoseconds driven by the time the caller
// passes to Handle. Heartbeats and leaves take no token: heartbeats must
// keep the connection alive even while messages are being refused, and a
// leave only ever frees resources. The socket layer's frame limits bound
// them.
//
// # Presence
//
// A Presence is one topic's presence list, kept by the host: Track,
// Untrack and UntrackAll return the Diff to broadcast as presence_diff,
// and State is the presence_state payload for a socket that has just
// joined, both in the shapes phoenix.js's Presence.syncState and
// Presence.syncDiff read. Every meta gets a phx_ref that is never reused;
// an update carries the ref it replaces as phx_ref_prev.
package phoenix

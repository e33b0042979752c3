// Package ibv is the client-visible vocabulary of vrnicd, with the
// ibverbs names and numbers: QP types and states, MTUs, QP attributes and
// their mask bits, queue sizes, address vectors, work requests' opcodes,
// flags and scatter/gather elements, work completions and their statuses,
// opcodes and flags, access flags, memory window types, memory keys and
// connection manager states.
//
// It is a leaf: it imports nothing of this module, so that the client SDK
// (verbsock/verbs) can speak it without linking the engine. The engine
// (transport, transport/mem, transport/cm) aliases these definitions under
// its own names (transport.WC is ibv.WC, mem.Access is ibv.Access), and
// the SDK re-exports them (verbs.WC is ibv.WC): one definition, shared by
// the engine, the daemon and the client.
package ibv

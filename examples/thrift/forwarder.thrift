// The forwarder's protocol: every message names its destination (key) and
// carries a payload of any size.
service Forwarder {
    oneway void msg(1: i32 key, 2: string payload)
}

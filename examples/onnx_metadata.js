// An ONNX file's metadata_props, read from the protobuf directly (onnxruntime-node does not expose a model's
// custom metadata): shared by the examples that read a Shepherd policy's "shepherd" metadata (cartpole_onnx.js
// with an exported policy, cartpole_client.js --acting client with the behaviour policy it fetches).
"use strict";

// The metadata_props of a serialized ModelProto (field 14: key 1, value 2) as an object of strings.
function metadataProps(buffer) {
  const props = {};
  const varint = (state) => {
    let value = 0, factor = 1, byte;
    do {
      if (state.at >= state.end) throw new Error("truncated");
      byte = buffer[state.at++];
      value += (byte & 0x7f) * factor;
      factor *= 128;
    } while (byte & 0x80);
    return value;
  };
  const fields = (start, end, visit) => {
    const state = { at: start, end };
    while (state.at < end) {
      const tag = varint(state), field = Math.floor(tag / 8), wire = tag % 8;
      if (wire === 0) varint(state);
      else if (wire === 1) state.at += 8;
      else if (wire === 5) state.at += 4;
      else if (wire === 2) {
        const length = varint(state);
        if (state.at + length > end) throw new Error("truncated");
        visit(field, state.at, state.at + length);
        state.at += length;
      } else throw new Error(`wire type ${wire}`);
    }
  };
  fields(0, buffer.length, (field, start, end) => {
    if (field !== 14) return;
    const entry = {};
    fields(start, end, (f, s, e) => { entry[f] = buffer.toString("utf8", s, e); });
    if (entry[1] !== undefined) props[entry[1]] = entry[2] || "";
  });
  return props;
}

module.exports = { metadataProps };

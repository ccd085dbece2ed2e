// bench/lib: what bench/bench.js and bench/torture.js share (processes, ports,
// a RESP client, Redis topologies, nginx, waiting, reports).
"use strict";
module.exports = {
  ...require("./wait"),
  ...require("./ports"),
  ...require("./proc"),
  ...require("./resp"),
  ...require("./redis"),
  ...require("./nginx"),
  ...require("./report"),
  topology: require("./topology"),
};

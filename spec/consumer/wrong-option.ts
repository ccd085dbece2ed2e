// Must not type-check: ttl is a number of ms.
import * as dlock from "resty.dlock";

export const [locks] = dlock.new({ dict: "dlock", ttl: "5", redis: { host: "127.0.0.1", port: 6379 } });

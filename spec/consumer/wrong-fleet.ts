// Must not type-check: fleet applies with on_error = "local" only.
import type * as gateway from "resty.dlock.gateway";

export const api: gateway.Options = { mode: "rate", key: "$http_x_api_key", rate: 100, on_error: "deny", fleet: 4 };

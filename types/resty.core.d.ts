// lua-resty-core internals that tell requests apart (src/resty/dlock/request.ts),
// and the request-body API of ngx_lua. Merged with the declarations in ngx.d.ts
// and luajit.d.ts.

/** The ngx_http_request_t * of the current request, as FFI cdata. */
interface NgxRequestPtr {
  readonly __ngxRequestBrand: unique symbol;
}

/** A cdata scalar (an FFI cast result). */
interface FfiScalar {
  readonly __ffiScalarBrand: unique symbol;
}

/** require "resty.core.base" */
interface RestyCoreBase {
  get_request(this: void): NgxRequestPtr | undefined;
}

/** A ctype object (ffi.typeof): casts with it skip parsing a declaration. */
interface FfiCtype {
  readonly __ffiCtypeBrand: unique symbol;
}

/** @noSelf */
interface FfiModule {
  typeof(ct: string): FfiCtype;
  cast(ct: FfiCtype, v: NgxRequestPtr | FfiScalar): FfiScalar;
}

/** @noSelf */
interface NgxReqApi {
  read_body(): void;
}

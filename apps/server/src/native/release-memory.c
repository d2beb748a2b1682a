/*
 * release-memory.node: one function, `trim()`, that returns the C heap's free pages to the system
 * (glibc's malloc_trim) and says whether any were returned. Start-up (reading and compiling a few
 * hundred modules) leaves free memory spread through the heap, which free() alone never gives back.
 * Off glibc it does nothing and returns false. A Node-API module, so one build serves every Node
 * version; the four declarations below are Node-API's stable C interface (js_native_api.h), written
 * out so that building needs only a C compiler.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

typedef struct napi_env__ *napi_env;
typedef struct napi_value__ *napi_value;
typedef struct napi_callback_info__ *napi_callback_info;
typedef int napi_status;
typedef napi_value (*napi_callback)(napi_env env, napi_callback_info info);

napi_status napi_create_function(napi_env env, const char *name, size_t length, napi_callback cb,
                                 void *data, napi_value *result);
napi_status napi_get_boolean(napi_env env, bool value, napi_value *result);

static napi_value trim(napi_env env, napi_callback_info info) {
  (void)info;
#if defined(__GLIBC__)
  bool released = malloc_trim(0) == 1;
#else
  bool released = false;
#endif
  napi_value result = NULL;
  napi_get_boolean(env, released, &result);
  return result;
}

__attribute__((visibility("default"))) napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  (void)exports;
  napi_value fn = NULL;
  napi_create_function(env, "trim", (size_t)-1, trim, NULL, &fn);
  return fn;
}

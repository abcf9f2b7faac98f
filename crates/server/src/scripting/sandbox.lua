-- Engram's script sandbox, run once in each new Lua state (sandbox.rs).
--
-- Redis 7.0 patches its Lua to mark tables read-only; Engram's Lua 5.1 is
-- stock, so read-only tables are views here: an empty table whose
-- metatable reads through to the real one and refuses writes, with a
-- read-only table standing in for the metatable (getmetatable shows it).
-- The globals table itself is emptied and becomes such a view of the
-- allowed globals, so every assignment to a global reaches __newindex.
-- rawset and setmetatable refuse the views.

local hooks, rust, eval_mode, run_call, run_pcall, run_tables, setresp, set_repl, acl_check_cmd = ...
local G = _G
local rawget, rawset, setmetatable, getmetatable = rawget, rawset, setmetatable, getmetatable
local error, type, tostring, tonumber, select = error, type, tostring, tonumber, select
local pairs, ipairs, pcall, xpcall, floor, concat = pairs, ipairs, pcall, xpcall, math.floor, table.concat
local loadstring, load = loadstring, load

local protected = setmetatable({}, { __mode = 'k' })

-- An assignment names the script's line (Redis's Lua raises it from the
-- VM); rawset and setmetatable, C functions in Redis, do not.
local function readonly()
  error('Attempt to modify a readonly table', 2)
end

local function shown_metatable()
  local shown = setmetatable({}, { __newindex = readonly })
  protected[shown] = true
  return shown
end

-- A read-only view of `t`; `strict`: reading a missing name is an error.
local function protect(t, strict)
  local index = t
  if strict then
    index = function(_, name)
      local value = t[name]
      if value == nil then
        error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
      end
      return value
    end
  end
  local view = setmetatable({}, { __index = index, __newindex = readonly, __metatable = shown_metatable() })
  protected[view] = true
  return view
end

-- Redis's luaPushErrorBuff: "-CODE message" or "message" into {err="CODE message"}.
local function error_table(text)
  local code, message = 'ERR', text
  if text:sub(1, 1) == '-' then
    local space = text:find(' ', 1, true)
    if space then
      code, message = text:sub(2, space - 1), text:sub(space + 1)
    else
      message = text:sub(2)
    end
  end
  message = (message:gsub('^[\r\n]+', ''):gsub('[\r\n]+$', ''))
  return { err = code .. ' ' .. message }
end

-- A library whose Rust functions return `ok, ...`: raise the message
-- when not ok (no position, as a C library's luaL_error from Lua's view).
local function raise_unless(ok, ...)
  if not ok then
    error((...), 0)
  end
  return ...
end
local function raising_library(functions)
  local library = {}
  for name, value in pairs(functions) do
    if type(value) == 'function' then
      library[name] = function(...) return raise_unless(value(...)) end
    else
      library[name] = value
    end
  end
  return library
end

local function truncate(n)
  if n >= 0 then return floor(n) end
  return -floor(-n)
end

local function log(...)
  local n = select('#', ...)
  if n < 2 then
    error(error_table('redis.log() requires two arguments or more.'), 0)
  end
  local level = tonumber((...))
  if level == nil then
    error(error_table('First argument must be a number (log level).'), 0)
  end
  level = truncate(level)
  if level < 0 or level > 3 then
    error(error_table('Invalid debug level.'), 0)
  end
  local parts = {}
  for i = 2, n do
    local part = select(i, ...)
    local kind = type(part)
    if kind == 'string' or kind == 'number' then
      parts[#parts + 1] = tostring(part)
    end
  end
  rust.log(level, concat(parts, ' '))
end

local function add_log_and_version(api)
  api.log = log
  api.LOG_DEBUG, api.LOG_VERBOSE, api.LOG_NOTICE, api.LOG_WARNING = 0, 1, 2, 3
  api.REDIS_VERSION, api.REDIS_VERSION_NUM = rust.version, rust.version_num
end

-- The `redis` table scripts run with.
local redis = {}
-- Outside a run both raise; a run puts its own in place (`run_with`).
local function outside_a_run()
  error(error_table('redis.call/pcall can only be called inside a script invocation'), 0)
end
redis.call, redis.pcall = outside_a_run, outside_a_run
-- Rust functions, as Redis's are C functions: they act on the run in
-- progress (or raise Redis's error outside one), and raise their refusals
-- themselves, so that a tail call to them keeps the script's frame.
redis.setresp, redis.set_repl, redis.acl_check_cmd = setresp, set_repl, acl_check_cmd
redis.sha1hex = function(...)
  if select('#', ...) ~= 1 then
    error(error_table('wrong number of arguments'), 0)
  end
  return rust.sha1hex((...))
end
redis.error_reply = function(...)
  local text = ...
  if select('#', ...) ~= 1 or type(text) ~= 'string' then
    return error_table('wrong number or type of arguments')
  end
  if text:sub(1, 1) ~= '-' then
    text = '-' .. text
  end
  return error_table(text)
end
redis.status_reply = function(...)
  local text = ...
  if select('#', ...) ~= 1 or type(text) ~= 'string' then
    return error_table('wrong number or type of arguments')
  end
  return { ok = text }
end
add_log_and_version(redis)
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
if eval_mode then
  redis.replicate_commands = function() return true end
  redis.breakpoint = function() return false end
  redis.debug = function() end
end

-- math.random and math.randomseed over Redis's own generator (rust.rand).
local function int_argument(position, value)
  local number = tonumber(value)
  if number == nil then
    error("bad argument #" .. position .. " to 'random' (number expected, got " .. type(value) .. ")", 3)
  end
  return truncate(number)
end
local math_view = {}
for name, value in pairs(math) do
  math_view[name] = value
end
math_view.random = function(...)
  local n = select('#', ...)
  local r = rust.rand()
  if n == 0 then
    return r
  elseif n == 1 then
    local upper = int_argument(1, (...))
    if upper < 1 then
      error("bad argument #1 to 'random' (interval is empty)", 2)
    end
    return floor(r * upper) + 1
  elseif n == 2 then
    local lower, upper = ...
    lower, upper = int_argument(1, lower), int_argument(2, upper)
    if lower > upper then
      error("bad argument #2 to 'random' (interval is empty)", 2)
    end
    return floor(r * (upper - lower + 1)) + lower
  end
  error('wrong number of arguments', 2)
end
math_view.randomseed = function(seed)
  rust.srand(int_argument(1, seed))
end

-- Redis's pcall: an error table caught is returned as its message.
local function caught(ok, ...)
  if not ok then
    local e = ...
    if type(e) == 'userdata' then
      local text = rust.raised_text(e)
      if text ~= nil then
        return false, text
      end
    elseif type(e) == 'table' then
      local message = e.err
      if type(message) == 'string' or type(message) == 'number' then
        return false, message
      end
    end
    return false, e
  end
  return ok, ...
end

local function refuse_binary(code)
  return type(code) == 'string' and code:sub(1, 1) == '\27'
end

-- The globals scripts see.
local globals = {}
for _, name in ipairs({ 'xpcall', 'tostring', 'getfenv', 'next', 'assert', 'tonumber', 'rawequal',
  'collectgarbage', 'getmetatable', 'type', 'select', 'unpack', 'gcinfo', 'pairs', 'rawget',
  'ipairs', '_VERSION', 'setfenv', 'error', 'newproxy' }) do
  globals[name] = G[name]
end
globals.string = protect(string)
globals.table = protect(table)
globals.math = protect(math_view)
globals.coroutine = protect(coroutine)
globals.cjson = protect(raising_library(rust.cjson))
globals.bit = protect(raising_library(rust.bit))
if rust.struct then
  globals.struct = protect(rust.struct)
end
if rust.cmsgpack then
  globals.cmsgpack = protect(rust.cmsgpack)
end
globals.redis = protect(redis)
globals._G = G
globals.rawset = function(t, k, v)
  if protected[t] then
    error('Attempt to modify a readonly table', 0)
  end
  return rawset(t, k, v)
end
globals.setmetatable = function(t, mt)
  if protected[t] then
    error('Attempt to modify a readonly table', 0)
  end
  return setmetatable(t, mt)
end
globals.pcall = function(f, ...)
  return caught(pcall(f, ...))
end
globals.loadstring = function(code, name)
  if refuse_binary(code) then
    return nil, 'binary chunks are not allowed'
  end
  return loadstring(code, name)
end
globals.load = function(reader, name)
  local pieces = {}
  if type(reader) == 'function' then
    while true do
      local piece = reader()
      if piece == nil or piece == '' then break end
      pieces[#pieces + 1] = piece
    end
  end
  local code = concat(pieces)
  if refuse_binary(code) then
    return nil, 'binary chunks are not allowed'
  end
  return loadstring(code, name)
end

-- Strings' metatable: getmetatable('') shows a read-only view whose
-- __index is the read-only string library.
rawset(getmetatable(''), '__metatable', protect({ __index = globals.string }))

-- FUNCTION LOAD's globals: only redis.register_function, log and the version.
local library_api = {}
library_api.register_function = function(...)
  local hook = hooks.register_function
  if hook == nil then
    error(error_table('redis.register_function can only be called on FUNCTION LOAD command'), 0)
  end
  local ok, value = hook(...)
  if not ok then
    error(value, 0)
  end
end
add_log_and_version(library_api)
local load_globals = { redis = protect(library_api, true) }

-- Lock the globals: empty the real table and read through to the allowed
-- ones (`globals`, or FUNCTION LOAD's: `hooks.global_view.__index` says
-- which). A table as __index, not a function: the VM follows it without a
-- call, and a short script reads `redis` and `KEYS` a few times a run. A
-- name neither holds reaches the allowed tables' own __index, which
-- raises Redis's error.
local names = {}
for name in pairs(G) do
  names[#names + 1] = name
end
for _, name in ipairs(names) do
  rawset(G, name, nil)
end
local nonexistent = {
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
}
setmetatable(globals, nonexistent)
setmetatable(load_globals, nonexistent)
hooks.global_view = {
  __index = globals,
  __newindex = readonly,
  __metatable = shown_metatable(),
}
setmetatable(G, hooks.global_view)
protected[G] = true

-- Runs a script or function under the error handler.
local function run(f, handler, keys, argv)
  return xpcall(function() return f(keys, argv) end, handler)
end

-- Runs a script or function with the run's functions in place:
-- `run_call` and `run_pcall` as redis.call and redis.pcall, and, for
-- EVAL, KEYS and ARGV (which `run_tables`
-- makes, from the run's arguments) as globals. Set and
-- cleared here, in the VM: each table write made from Rust costs far
-- more, and a short script's run is mostly such costs. The function
-- xpcall runs is made once: it finds the run's script and tables in
-- upvalues, so a run leaves no closure behind for the collector.
local outside_call, outside_pcall = redis.call, redis.pcall
local run_f, run_keys, run_argv
local function invoke()
  return run_f(run_keys, run_argv)
end
local function run_with(f, handler, set_globals)
  local keys, argv = run_tables()
  redis.call, redis.pcall = run_call, run_pcall
  if set_globals then
    globals.KEYS, globals.ARGV = keys, argv
  end
  run_f, run_keys, run_argv = f, keys, argv
  local ok, value = xpcall(invoke, handler)
  run_f, run_keys, run_argv = nil, nil, nil
  redis.call, redis.pcall = outside_call, outside_pcall
  return ok, value
end

return globals, load_globals, run, redis, run_with

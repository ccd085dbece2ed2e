-- The RESP reader of auto-pipelining: replies parsed from whatever the
-- connection hands over (receiveany), so a reply may end anywhere in a read.
local h = require "helpers"
local resp = require "resty.dlock.redis.resp"

--- A connection that hands over `stream` `step` bytes per read, then fails as a closed one does.
local function conn(stream, step)
  local pos = 1
  return {
    receiveany = function(_, max)
      if pos > #stream then return nil, "closed" end
      local n = math.min(step, max)
      local chunk = stream:sub(pos, pos + n - 1)
      pos = pos + n
      return chunk
    end,
  }
end

local STREAM = table.concat({
  "+OK\r\n",
  "-NOSCRIPT No matching script\r\n",
  ":42\r\n",
  "$5\r\nhe\r\nl\r\n",          -- a bulk string holding CRLF
  "$-1\r\n",
  "*-1\r\n",
  "*3\r\n:-1\r\n$2\r\nt1\r\n*2\r\n+OK\r\n-ERR inner\r\n",
  "$0\r\n\r\n",
})

local function all(r)
  local out = {}
  for i = 1, 8 do
    local v, err = resp.read(r)
    out[i] = { v, err }
  end
  return out
end

describe("the RESP reader", function()
  it("reads every kind of reply, in order, whether the stream comes at once or a byte at a time", function()
    local whole = all(resp.reader(conn(STREAM, 65536)))
    assert.same({ "OK" }, whole[1])
    assert.same({ false, "NOSCRIPT No matching script" }, whole[2])
    assert.same({ 42 }, whole[3])
    assert.same({ "he\r\nl" }, whole[4])
    assert.equal(ngx.null, whole[5][1])
    assert.equal(ngx.null, whole[6][1])
    assert.same({ { -1, "t1", { "OK", { false, "ERR inner" } } } }, whole[7])
    assert.same({ "" }, whole[8])
    for _, step in ipairs({ 1, 2, 3, 7, 13 }) do
      local r = resp.reader(conn(STREAM, step))
      assert.same(whole, all(r), "reads of " .. step .. " byte(s)")
      assert.is_true(resp.drained(r))
    end
  end)

  it("fails a reply the connection cut short with the connection's error, and says what was left unread", function()
    local r = resp.reader(conn("+OK\r\n$10\r\nabc", 4))
    assert.same({ "OK" }, { resp.read(r) })
    assert.same({ nil, "closed" }, { resp.read(r) })
    local extra = resp.reader(conn("+OK\r\n:1\r\n", 100))
    assert.same({ "OK" }, { resp.read(extra) })
    assert.is_false(resp.drained(extra))
  end)

  it("refuses a line that is no reply at all", function()
    local v, err = resp.read(resp.reader(conn("HTTP/1.1 400 Bad Request\r\n", 100)))
    assert.is_nil(v)
    assert.matches("bad reply: TTP/1.1 400", err, 1, true)
  end)
end)

describe("a batch's commands", function()
  local command = require "resty.dlock.redis.command"
  local script = { name = "t", src = "return 1", sha = string.rep("a", 40), keys = 2 }

  it("are the RESP encoding of each call, words holding CRLF, digits or nothing included, and find every word again", function()
    local b = command.batchOf(nil, false)
    local first = command.add(b, script, "lock:{a}\r\nb", "q", "", 10000, "x y")
    local second = command.add(b, script, "k2", "t")
    assert.equal(resp.encode({ "EVALSHA", script.sha, 2, "lock:{a}\r\nb", "q", "", "10000", "x y" }) ..
      resp.encode({ "EVALSHA", script.sha, 2, "k2", "t" }), table.concat(b.parts, "", 1, b.n))
    for n, w in ipairs({ "lock:{a}\r\nb", "q", "", "10000", "x y" }) do
      assert.equal(w, command.wordOf(first, n))
    end
    assert.equal("t", command.wordOf(second, 2))
  end)

  it("are sent again as EVAL with the script's body for the calls that met NOSCRIPT, after ASKING when the batch asks", function()
    local b = command.batchOf(nil, true)
    command.add(b, script, "k1", "a")
    command.add(b, script, "k2", "b")
    assert.equal(resp.encode({ "ASKING" }) .. resp.encode({ "EVAL", script.src, 2, "k2", "b" }),
      table.concat(command.commands(b, { 2 }, true)))
    assert.equal(resp.encode({ "ASKING" }) .. resp.encode({ "EVALSHA", script.sha, 2, "k1", "a" }) ..
      resp.encode({ "ASKING" }) .. resp.encode({ "EVALSHA", script.sha, 2, "k2", "b" }),
      table.concat(command.commands(b, nil, false)))
  end)
end)

h.check_error_logs()

--[[ Generated with https://github.com/TypeScriptToLua/TypeScriptToLua ]]
local ____exports = {}
local check = require("resty.dlock.core.check")
--- Seconds one timer runs before it hands over to a fresh one.
local HANDOVER = 60
local function run(premature, l)
    local started = ngx.now()
    while l.busy() do
        ngx.sleep(l.tick())
        local ok, err = pcall(l.round)
        if not ok then
            ngx.log(
                ngx.ERR,
                "dlock: ",
                l.name,
                ": ",
                check.text(err)
            )
        end
        if ngx.now() - started >= HANDOVER and l.busy() then
            local handed = ngx.timer.at(0, run, l)
            if handed then
                return
            end
        end
    end
    l.running = false
end
--- Run the loop unless it runs already; nil, or why its timer could not start.
function ____exports.start(l)
    if l.running then
        return nil
    end
    local ok, err = ngx.timer.at(0, run, l)
    if not ok then
        return (("dlock: cannot start the " .. l.name) .. ": ") .. tostring(err)
    end
    l.running = true
    return nil
end
return ____exports

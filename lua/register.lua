-- register.lua: the library's functions, registered with Redis last,
-- once every local function they call is defined.

redis.register_function('decide___VERSION__', decide)
redis.register_function('claim___VERSION__', claim)
redis.register_function('release___VERSION__', release)
redis.register_function('failed___VERSION__', failed)
redis.register_function('carry___VERSION__', carry)
redis.register_function('hold___VERSION__', hold)
redis.register_function('admit___VERSION__', admit)
redis.register_function('lease___VERSION__', lease)
redis.register_function('credits___VERSION__', credits)
redis.register_function('refund___VERSION__', refund)
redis.register_function('balance___VERSION__', balance)
redis.register_function('settle___VERSION__', settle)
redis.register_function('share___VERSION__', share)
redis.register_function('unshare___VERSION__', unshare)
redis.register_function('unqueue___VERSION__', unqueue)

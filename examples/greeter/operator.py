"""A minimal operator: greets new Greetings, follows their changes, says goodbye on deletion."""

import kopf


@kopf.on.create('demo.kopf.dev', 'greetings')
def greet(spec, name, logger, **_):
    message = f"Hello, {spec.get('who', 'world')}!"
    logger.info(f"Greeting {name}: {message}")
    return {'message': message}


@kopf.on.update('greetings', field='spec.who')
def regreet(old, new, logger, **_):
    logger.info(f"Renamed from {old!r} to {new!r}.")
    return {'message': f"Hello again, {new}!"}


@kopf.on.delete('gr')
async def farewell(name, logger, **_):
    logger.info(f"Goodbye, {name}.")

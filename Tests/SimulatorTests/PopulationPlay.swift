@testable import Simulator

/// Plays `users` of the random population for `seed` with the standard catalog: what the store knows
/// afterwards, and every delivery the players sent (PopulationTests and SendTimeTests read both).
func playPopulation(_ users: Range<Int>, seed: UInt64, runId: Int, pki: SimulatorPKI) throws -> (StoreState, [Delivery]) {
    let config = StoreConfig(bundleId: SimulatorCatalog.bundleId, appAppleId: SimulatorSetup.appAppleId,
                             sharedSecret: SimulatorSetup.sharedSecret, catalog: SimulatorCatalog.standard, runId: runId)
    let emitter = WireEmitter(pki: pki, config: config)
    var population = PopulationConfig()
    population.seed = seed
    var store = StoreState(config: config)
    var deliveries: [Delivery] = []
    for index in users {
        var player = JourneyPlayer(config: population, emitter: emitter, userIndex: index)
        let (truth, sent) = try player.play()
        store.absorb(truth)
        deliveries += sent
    }
    return (store, deliveries)
}

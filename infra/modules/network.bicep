// Optional VNet (on by default): the Function App integrates with the `app` subnet and
// reaches Storage, Key Vault, PostgreSQL and Azure OpenAI through private endpoints in the
// `endpoints` subnet, resolved by the private DNS zones linked here.

param name string
param location string
param tags object
param addressPrefix string = '10.40.0.0/16'
param appSubnetPrefix string = '10.40.1.0/24'
param endpointSubnetPrefix string = '10.40.2.0/24'

// privatelink zones of the services the app reaches (public cloud names).
var zones = [
  'privatelink.blob.${environment().suffixes.storage}'
  'privatelink.queue.${environment().suffixes.storage}'
  'privatelink.table.${environment().suffixes.storage}'
  'privatelink.vaultcore.azure.net'
  'privatelink.postgres.database.azure.com'
  'privatelink.openai.azure.com'
]

resource nsg 'Microsoft.Network/networkSecurityGroups@2023-11-01' = {
  name: '${name}-nsg'
  location: location
  tags: tags
  properties: {
    securityRules: []
  }
}

resource vnet 'Microsoft.Network/virtualNetworks@2023-11-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    addressSpace: {
      addressPrefixes: [
        addressPrefix
      ]
    }
    subnets: [
      {
        name: 'app'
        properties: {
          addressPrefix: appSubnetPrefix
          networkSecurityGroup: {
            id: nsg.id
          }
          delegations: [
            {
              name: 'flex-consumption'
              properties: {
                serviceName: 'Microsoft.App/environments'
              }
            }
          ]
        }
      }
      {
        name: 'endpoints'
        properties: {
          addressPrefix: endpointSubnetPrefix
          networkSecurityGroup: {
            id: nsg.id
          }
          privateEndpointNetworkPolicies: 'Enabled'
        }
      }
    ]
  }
}

resource dns 'Microsoft.Network/privateDnsZones@2020-06-01' = [for zone in zones: {
  name: zone
  location: 'global'
  tags: tags
}]

resource links 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2020-06-01' = [for (zone, i) in zones: {
  parent: dns[i]
  name: '${name}-link'
  location: 'global'
  properties: {
    registrationEnabled: false
    virtualNetwork: {
      id: vnet.id
    }
  }
}]

output vnetId string = vnet.id
output appSubnetId string = '${vnet.id}/subnets/app'
output endpointSubnetId string = '${vnet.id}/subnets/endpoints'
output blobZoneId string = dns[0].id
output queueZoneId string = dns[1].id
output tableZoneId string = dns[2].id
output vaultZoneId string = dns[3].id
output postgresZoneId string = dns[4].id
output openAiZoneId string = dns[5].id

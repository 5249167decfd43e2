// One private endpoint (and its DNS zone group) for one service of one resource.

param name string
param location string
param tags object
param subnetId string
param targetId string
@description('The target\'s sub-resource: blob, queue, table, vault, postgresqlServer, account.')
param groupId string
param zoneId string

resource endpoint 'Microsoft.Network/privateEndpoints@2023-11-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    subnet: {
      id: subnetId
    }
    privateLinkServiceConnections: [
      {
        name: name
        properties: {
          privateLinkServiceId: targetId
          groupIds: [
            groupId
          ]
        }
      }
    ]
  }
}

resource zoneGroup 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2023-11-01' = {
  parent: endpoint
  name: 'default'
  properties: {
    privateDnsZoneConfigs: [
      {
        name: groupId
        properties: {
          privateDnsZoneId: zoneId
        }
      }
    ]
  }
}
